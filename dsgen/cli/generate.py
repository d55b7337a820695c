"""``dsgen generate``: one labelled pair dataset, over :func:`dsgen.api.generate`. Its help texts show the
generation config's defaults (they live in the config)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

import dsgen.cli.options as o
from dsgen.cli.options import generation_help as default_in_help
from dsgen.cli.output import console


def generate_cmd(
    task: Annotated[Optional[str], typer.Option(help=default_in_help(
        "Task spec: sts-x2, sts-x1, gense, or a DINO-format JSON file.", "task"))] = None,
    inputs: Annotated[Optional[str], typer.Option(
        help="x1 source: stsb-train, a text file (one per line) or an sts-x1 JSONL.")] = None,
    max_inputs: Annotated[Optional[int], typer.Option(help="Use only the first N inputs.")] = None,
    per_label: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Continuations drawn per (x1, label) (postprocessing keeps 2).", "per_label"))] = None,
    max_attempts: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Tries per (x1, label); >1 re-samples rejected outputs (not DINO's).", "max_attempts"))] = None,
    entries_per_label: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Sentences per label for tasks without inputs (sts-x1).", "entries_per_label"))] = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    decay: Annotated[Optional[float], typer.Option(help=default_in_help(
        "Self-debiasing decay constant lambda (0: off).", "sampling.decay_constant"))] = None,
    top_k: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Top-k for tasks with inputs (0: off).", "sampling.top_k"))] = None,
    top_p: Annotated[Optional[float], typer.Option(help=default_in_help("Top-p.", "sampling.top_p"))] = None,
    max_new_tokens: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Most tokens per output.", "sampling.max_new_tokens"))] = None,
    no_counter_labels: Annotated[bool, typer.Option(
        "--no-counter-labels", help="Ignore the spec's counter labels.")] = False,
    batch_size: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Most sequences (main + counter rows) decoded together.", "batch_size"))] = None,
    chunk_inputs: Annotated[Optional[int], typer.Option(help=default_in_help(
        "Inputs per resumable chunk.", "chunk_inputs"))] = None,
    device: o.Device = None,
    dtype: Annotated[Optional[str], typer.Option(help=default_in_help(
        "float32 (DINO), bfloat16 or float16.", "dtype"))] = None,
    backend: o.Backend = "local",
    address: o.Address = None,
    workers: o.Workers = None,
    cpus_per_worker: o.CpusPerWorker = None,
    data_dir: o.DataDir = None,
    data_seed: o.DataSeed = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start over instead of resuming finished chunks.")] = False,
    out: o.PairsFile = Path("pairs.jsonl"),
    overwrite: o.Overwrite = False,
    quiet: o.Quiet = False,
    seed: o.LegacySeed = None,
) -> None:
    """Generate a labelled pair dataset with self-debiased decoding (DINO)."""
    from dsgen.api import generate

    made = generate(out=out, task=task, inputs=inputs, max_inputs=max_inputs, per_label=per_label,
                    max_attempts=max_attempts, entries_per_label=entries_per_label, generator=generator,
                    base_url=base_url, decay=decay, top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens,
                    counter_labels=not no_counter_labels, batch_size=batch_size, chunk_inputs=chunk_inputs,
                    device=device, dtype=dtype, backend=backend, address=address, workers=workers,
                    cpus_per_worker=cpus_per_worker, data_dir=data_dir, data_seed=o.data_seed_given(data_seed, seed),
                    fresh=fresh, overwrite=overwrite, progress=not quiet)
    console().print(f"wrote {len(made.pairs)} pairs to {made.path} ({made.description})")


__all__ = ["generate_cmd"]
