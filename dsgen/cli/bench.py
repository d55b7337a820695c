"""``dsgen bench``: speed benchmarks (:mod:`dsgen.benchmarks`), each against a baseline measured in the same run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

import dsgen.cli.options as o
from dsgen.errors import DsgenError

SCHEDULING_METHODS = ("dino", "dino-decay0", "human", "base")


def _or(value: Optional[int], default: int) -> int:
    return default if value is None else value


def bench_generation(
    generator: o.Generator = "smollm2-135m",
    n_inputs: Annotated[int, typer.Option(help="STS benchmark train sentences to use.")] = 24,
    batch_size: Annotated[Optional[list[int]], typer.Option(
        help="Rows of the fast core; repeat to time several (default: the generation default 128, 256, 512).")] = None,
    greedy_items: Annotated[int, typer.Option(
        help="(x1, label) items for the greedy equivalence check (0: skip).")] = 12,
    data_dir: o.DataDir = None,
    device: o.Device = "auto",
    data_seed: o.DataSeed = None,
    precision: Annotated[Optional[str], typer.Option(
        help="Also time an opt-in lower-precision copy: int8 or bfloat16.")] = None,
    row_counts: Annotated[Optional[str], typer.Option(
        help="Also time the core at the fastest batch with decode steps cut into these row counts and the exact-sum "
             "softmax, as on a CPU whose probe found them, e.g. an Intel Xeon's plain kernel's 16-56,193-512 "
             "(speed only).")] = None,
    plain_weights: Annotated[bool, typer.Option(
        help="Also time the core at the fastest batch with oneDNN's weights plain (reordered on every multiply) "
             "instead of packed once ahead, where the probe chose oneDNN (speed; the outputs must be the same).")
    ] = False,
    json_out: o.JsonFile = None,
    seed: o.LegacySeed = None,
) -> None:
    """Core vs DINO-style reference loop: outputs/s, ratio, tokens/s, share of the machine's peak, greedy agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.generation import run
    from dsgen.models import check_device
    from dsgen.planning import Overrides

    if n_inputs < 1 or any(b < 1 for b in batch_size or []) or greedy_items < 0:
        raise DsgenError("--n-inputs and --batch-size must be at least 1 and --greedy-items non-negative")
    if precision not in (None, "int8", "bfloat16"):
        raise DsgenError(f"--precision must be int8 or bfloat16 (got '{precision}')")
    counts = parse_counts(row_counts) if row_counts is not None else None
    generator = generator or "smollm2-135m"
    if generator.startswith(Overrides.API_PREFIX):
        raise DsgenError("bench generation times the local decode loop; --generator openai:<model> has none")
    device = device or "auto"
    check_device(device)
    if json_out:
        check_writable_target(json_out)
    run(generator=generator, n_inputs=n_inputs, batch_sizes=batch_size, greedy_items=greedy_items,
        data_dir=data_dir, device=device, seed=_or(o.data_seed_given(data_seed, seed), 42), json_out=json_out,
        precision=precision, row_counts=counts, plain_weights=plain_weights)


def parse_counts(text: str) -> list[int]:
    """``"16-56,256"`` -> [16, 17, ..., 56, 256]; a one-line error for anything else. Counts run from 1 to the
    largest step :func:`~dsgen.generation.kernels.row_blocks` plans as a whole (``ROW_BLOCK_LIMIT``)."""
    from dsgen.generation.kernels import ROW_BLOCK_LIMIT as MAX_ROW_COUNT

    counts: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high if dash else low)  # "5-" is no range: int("") refuses it
        except ValueError:
            first, last = 0, -1
        if not 1 <= first <= last <= MAX_ROW_COUNT:
            raise DsgenError(f"--row-counts must be row counts and ranges from 1 to {MAX_ROW_COUNT} such as 16-56,256,512 "
                             f"(got '{text}')")
        counts.update(range(first, last + 1))
    return sorted(counts)


def bench_eval(
    model: o.BenchModel = "minilm-l6",
    tasks: o.Tasks = None,
    data_dir: o.DataDir = None,
    batch_size: Annotated[int, typer.Option(help="Batch size of the naive baseline.")] = 64,
    dtype: Annotated[str, typer.Option(help="Weights both encode with: float32 or bfloat16 (the cpu preset's, "
                                            "where the CPU has native bfloat16).")] = "float32",
    rounds: Annotated[int, typer.Option(help="Rounds of naive, first run and later runs, for the ratios' spread.")] = 1,
    later_runs: Annotated[int, typer.Option(
        help="Later runs of a comparison per round (token cache warm, other weights).")] = 2,
    threads: Annotated[Optional[int], typer.Option(
        help="torch's intra-op threads for the whole benchmark (default: torch's).")] = None,
    token_budget: Annotated[Optional[list[int]], typer.Option(
        help="Further evaluator batch shapes to time, in padded tokens per batch; repeatable (default: 8192).")] = None,
    json_out: o.JsonFile = None,
) -> None:
    """The evaluator (distinct sentences tokenised once, length-bucketed batches) vs naive per-task encoding: first and later runs of a comparison, ratios and their spread, score agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.evaluation import run
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import check_dtype

    tasks = tasks or "mteb"
    parse_tasks(tasks)
    check_dtype(dtype)
    if batch_size < 1 or rounds < 1 or later_runs < 0 or (threads is not None and threads < 1):
        raise DsgenError("--batch-size, --rounds and --threads must be at least 1 and --later-runs non-negative")
    if token_budget and min(token_budget) < 1:
        raise DsgenError(f"--token-budget must be at least 1 (got {min(token_budget)})")
    if json_out:
        check_writable_target(json_out)
    run(model=model, tasks=tasks, data_dir=data_dir, batch_size=batch_size, json_out=json_out,
        token_budgets=tuple(token_budget) if token_budget else None, dtype=dtype, rounds=rounds,
        later_runs=later_runs, threads=threads)


def bench_training(
    model: o.BenchModel = None,
    trainer: Annotated[str, typer.Option(
        help="regression (DINO's cosine regression; default --model smollm2-l4) or sdi (RISE's classifier on the "
             "pairs' sentences; default --model minilm-l6).")] = "regression",
    pairs: Annotated[int, typer.Option(help="STS benchmark train pairs to train on (gold / 5).")] = 320,
    rounds: Annotated[int, typer.Option(help="Rounds of the padded and the trimmed trainings, for the ratio's "
                                              "spread.")] = 2,
    batch_size: Annotated[int, typer.Option(help="Rows per batch (DINO's and RISE's: 32).")] = 32,
    overhead: Annotated[Optional[list[int]], typer.Option(
        help="Further per-group costs to time the cut at, in padded tokens; repeatable (default: none; regression "
             "only).")] = None,
    data_dir: o.DataDir = None,
    json_out: o.JsonFile = None,
) -> None:
    """A trainer with each batch computed without most of its padding (packed, or in groups of similar length) vs padded whole: seconds per step, speed-up and its spread, the padding each leaves, weight agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.training import run

    if trainer not in ("regression", "sdi"):
        raise DsgenError(f"--trainer must be regression or sdi (got '{trainer}')")
    if pairs < 2 or rounds < 1 or batch_size < 2 or any(n < 0 for n in overhead or []):
        raise DsgenError("--pairs and --batch-size must be at least 2, --rounds at least 1 and --overhead non-negative")
    if overhead and trainer == "sdi":
        raise DsgenError("--overhead times the regression trainer's cut; drop it for --trainer sdi")
    if json_out:
        check_writable_target(json_out)
    run(encoder=model, trainer=trainer, pairs=pairs, rounds=rounds, batch_size=batch_size,
        overheads=tuple(overhead or ()), data_dir=data_dir, json_out=json_out)


def bench_scheduling(
    methods: Annotated[Optional[list[str]], typer.Argument(
        help=f"Methods of the comparison (default: {' '.join(SCHEDULING_METHODS)}).", show_default=False)] = None,
    preset: o.Preset = "smoke",
    seeds: o.Seeds = "1,2",
    data_seeds: o.DataSeeds = None,
    nodes: Annotated[int, typer.Option(help="Nodes of the local Ray cluster (a head without CPUs besides).")] = 2,
    cpus: Annotated[int, typer.Option(help="CPUs of each node, and of each task.")] = 1,
    out: o.RunsFolder = Path("runs/bench/scheduling"),
    data_dir: o.DataDir = None,
    json_out: o.JsonFile = None,
    legacy_methods: o.LegacyMethods = None,
) -> None:
    """A comparison on the local scheduler vs a local Ray cluster of --nodes x --cpus (its --out emptied first): wall time, what scheduling adds per task, the cost model."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.scheduling import run
    from dsgen.method import get_method
    from dsgen.orchestration import seed_list
    from dsgen.presets import load_preset

    names = o.methods_given(methods, legacy_methods) or list(SCHEDULING_METHODS)
    for m in names:
        get_method(m)
    load_preset(preset)
    seed_list(seeds)
    seed_list(data_seeds, "--data-seeds")
    if nodes < 1 or cpus < 1:
        raise DsgenError("--nodes and --cpus must be at least 1")
    from dsgen.generation.ray_backend import import_ray

    import_ray()
    check_writable_target(out)
    if json_out:
        check_writable_target(json_out)
    run(preset=preset, methods=tuple(names), seeds=seeds, data_seeds=data_seeds, nodes=nodes, cpus=cpus, out=out,
        data_dir=data_dir, json_out=json_out)


def bench_table(
    n_methods: Annotated[int, typer.Option(help="Methods compared with the reference.")] = 8,
    n_seeds: Annotated[int, typer.Option(help="Seeds (prediction vectors) per method.")] = 3,
    tasks: o.Tasks = "stsb,sickr-test",
    n_boot: Annotated[int, typer.Option(help="Resamples per task, as a comparison table draws them.")] = 1000,
    data_dir: o.DataDir = None,
    json_out: o.JsonFile = None,
) -> None:
    """A comparison table's paired bootstrap: dsgen's (reference and gold ranked once, by counting) vs the previous path (each method on its own, sorting), on the same predictions; speed-up and bit-for-bit agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.statistics import run
    from dsgen.evaluation.tasks import parse_tasks

    parse_tasks(tasks)
    if n_methods < 1 or n_seeds < 1 or n_boot < 1:
        raise DsgenError("--n-methods, --n-seeds and --n-boot must be at least 1")
    if json_out:
        check_writable_target(json_out)
    run(methods=n_methods, seeds=n_seeds, tasks=tasks, n_boot=n_boot, data_dir=data_dir, json_out=json_out)


__all__ = ["bench_eval", "bench_generation", "bench_scheduling", "bench_table", "bench_training"]
