"""Backends that decode chunks: ``local`` (this process) and ``ray`` (actors on a Ray cluster).

A backend gets the recipe of a decoder (:class:`DecoderSpec`, small and picklable) and the
chunks still to do, and reports each finished chunk's rows to the generator, which writes
them into the same ``<out>.partial/`` layout whichever backend ran them. Because every chunk
carries its own seed, the final file does not depend on the backend, the number of workers
or the order in which chunks finish.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from dsgen.generation.chunks import Chunk, decode_chunk
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.outputs import OutputRules
from dsgen.generation.sampling import SamplingConfig
from dsgen.registry import Registry
from dsgen.taskspec import OutputFormat

ChunkDone = Callable[[Chunk, "list[dict[str, Any]]", "dict[str, Any]"], None]


@dataclass(frozen=True)
class DecoderSpec:
    """Everything needed to build the decoder of a generation run, in any process.

    Args:
        generator: causal LM name (alias, HF id, directory or ``.gguf``).
        device / dtype: where and in which precision it runs.
        sampling: :class:`SamplingConfig` of the task.
        max_rows: rows decoded at once.
        output / allow_newlines / keep_unclosed: output rules (the task spec's :class:`OutputFormat`:
            where an output ends and what it must hold).
    """

    generator: str
    device: str
    dtype: str
    sampling: SamplingConfig
    max_rows: int
    output: OutputFormat = field(default_factory=OutputFormat)
    allow_newlines: bool = False
    keep_unclosed: bool = False

    def load(self) -> Any:
        from dsgen.models import load_causal_lm

        return load_causal_lm(self.generator, self.device, self.dtype)

    def build(self, lm: Any) -> DebiasedDecoder:
        end_ids = lm.end_ids()
        out = lm.model.get_output_embeddings()
        rules = OutputRules(lm.tokenizer, int(out.weight.shape[0]) if out is not None else None, self.output.end,
                            self.allow_newlines, self.keep_unclosed, end_ids, self.output)
        return DebiasedDecoder(lm.model, lm.tokenizer, self.sampling, self.max_rows, rules, end_ids)


@dataclass
class BackendReport:
    """What a backend tells the sidecar: its name, worker count and per-worker timings."""

    backend: str
    workers: int
    per_worker: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "workers": self.workers, "per_worker": self.per_worker}


class Backend(ABC):
    """Decodes chunks and hands each finished one to ``on_done(chunk, rows, timing)``."""

    name = "backend"

    @abstractmethod
    def run(self, spec: DecoderSpec, chunks: list[Chunk], on_done: ChunkDone,
            advance: Callable[[float], None]) -> BackendReport:
        """Decode ``chunks``; ``advance(n)`` moves the progress bar by n outputs."""


BACKENDS: Registry[Any] = Registry("generation backend")


@BACKENDS.register("local")
class LocalBackend(Backend):
    """Decode in this process with one model (``lm`` if given, else loaded from the spec)."""

    name = "local"

    def __init__(self, lm: Any = None) -> None:
        self.lm = lm

    def run(self, spec: DecoderSpec, chunks: list[Chunk], on_done: ChunkDone,
            advance: Callable[[float], None]) -> BackendReport:
        report = BackendReport(self.name, 1, {"local": {"chunks": 0, "seconds": 0.0}})
        if not chunks:
            return report
        lm = self.lm or spec.load()
        decoder = spec.build(lm)
        for chunk in chunks:
            started = time.perf_counter()
            accepted = [0]

            def on_output(o: Any) -> None:
                if o.accepted:
                    accepted[0] += 1
                    advance(1)

            rows, work = decode_chunk(decoder, chunk, on_output)
            advance(max(0, chunk.target - accepted[0]))  # the bar counts targets; unfilled ones are done too
            seconds = time.perf_counter() - started
            on_done(chunk, rows, {"worker": "local", "seconds": round(seconds, 3), **work})
            report.per_worker["local"]["chunks"] += 1
            report.per_worker["local"]["seconds"] = round(report.per_worker["local"]["seconds"] + seconds, 3)
        return report


BACKENDS.add("ray", "dsgen.generation.ray_backend:RayBackend")
