"""Chunks: the unit of resumable, distributable generation work.

A generation run is cut into chunks of ``chunk_inputs`` inputs. Each chunk carries its own
seed (derived from the run seed and the chunk number), so a chunk decodes to the same rows
whichever process, machine or backend runs it, and in whatever order. Finished chunks are
written atomically as ``<out>.partial/chunk-NNNNN.jsonl``; the final file is assembled from
them in chunk order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dsgen.artifacts import read_jsonl, stable_hash, write_jsonl
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.outputs import DecodeOutput, DecodeRequest


@dataclass(frozen=True)
class ChunkItem:
    """One (x1, label) of a chunk and what to ask the decoder for it."""

    x1: str | None
    label: str
    request: DecodeRequest


@dataclass(frozen=True)
class Chunk:
    index: int
    seed: int
    items: tuple[ChunkItem, ...]

    @property
    def target(self) -> int:
        """Outputs asked for (the progress bar counts these)."""
        return sum(i.request.n for i in self.items)


def chunk_seed(run_seed: int, index: int) -> int:
    """The seed of chunk ``index`` of a run: a hash, so chunks draw independent streams."""
    return int(stable_hash([run_seed, index]), 16) % 2**63


def decode_chunk(decoder: DebiasedDecoder, chunk: Chunk,
                 on_output: Callable[[DecodeOutput], None] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, work) of one chunk. Rows: every sampled output with its (x1, label), acceptance, try
    and length. Work: the decoder's counters for this chunk (rows forwarded, steps, forks...) and
    the numerics the machine's probe chose (:func:`dsgen.generation.invariance.numerics`), which
    every backend reports the same way."""
    before = dict(decoder.stats)
    results = decoder.decode([i.request for i in chunk.items], seed=chunk.seed, on_group_done=on_output)
    rows = []
    for item, outs in zip(chunk.items, results):
        for o in outs:
            rows.append({"x1": item.x1, "label": item.label, "text": o.text, "accepted": o.accepted,
                         "rejected": o.rejected, "attempt": o.attempt, "n_tokens": o.n_tokens})
    work: dict[str, Any] = {k: v - before.get(k, 0) for k, v in decoder.stats.items()}
    if decoder.numerics is not None:
        work["numerics"] = decoder.numerics.summary()
    return rows, work


class ChunkStore:
    """The ``<out>.partial/`` folder: a state file with the dataset key, and one file per finished chunk."""

    def __init__(self, out: Path) -> None:
        self.folder = out.with_name(out.name + ".partial")

    def path(self, index: int) -> Path:
        return self.folder / f"chunk-{index:05d}.jsonl"

    def open(self, key: str, n_chunks: int, resume: bool) -> set[int]:
        """Prepare the folder for a run with ``key``; return the chunks already done.

        A folder left by a run with other settings (or any folder when not resuming) is cleared.
        """
        import shutil

        from dsgen.artifacts import read_json, write_json

        state = self.folder / "state.json"
        if self.folder.exists():
            stale = not resume or not state.exists() or read_json(state).get("key") != key
            if stale:
                shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(state, {"key": key, "chunks": n_chunks})
        return {int(p.stem.split("-")[1]) for p in self.folder.glob("chunk-*.jsonl")}

    def write(self, index: int, rows: list[dict[str, Any]]) -> None:
        write_jsonl(self.path(index), rows)

    def read(self, index: int) -> list[dict[str, Any]]:
        return read_jsonl(self.path(index))

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
