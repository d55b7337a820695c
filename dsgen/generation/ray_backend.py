"""Generation on a Ray cluster: each worker is an actor that loads the model once and decodes chunks.

Self-debiasing couples only the rows of one (input, label) group, so generation shards by input
with no communication: the driver hands chunks to actors, each chunk decodes with its own seed,
and the driver writes each finished chunk atomically into the same ``<out>.partial/`` layout the
local backend uses. The final file is therefore the same whichever backend, worker count or
finishing order. A worker killed mid-chunk is restarted by Ray and its chunk retried
(``max_restarts`` / ``max_task_retries``); the driver killed mid-run resumes from the chunks
already on disk, with either backend.

``ray`` is an optional extra: ``pip install 'dsgen[ray]'``. Without ``--address`` a local Ray is
started for the run (and stopped after it); ``--address auto`` or ``HOST:PORT`` joins a cluster.
With ``--device cuda`` each actor takes one GPU; on CPUs the machine's cores are split between
the actors.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from dsgen.errors import DsgenError
from dsgen.generation.backends import Backend, BackendReport, ChunkDone, DecoderSpec
from dsgen.generation.chunks import Chunk

# environment the workers need to find the same models and data as the driver
FORWARDED_ENV = ("DSGEN_CACHE_DIR", "DSGEN_DATA_DIR", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_CACHE",
                 "TRANSFORMERS_VERBOSITY", "HF_HUB_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise DsgenError("--backend ray needs Ray; install it with: pip install 'dsgen[ray]'") from None
    return ray


class ChunkWorker:
    """The body of a Ray actor: one model, many chunks."""

    def __init__(self, spec: DecoderSpec, threads: int | None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.spec = spec
        self.started = time.perf_counter()
        self.lm = spec.load()
        self.decoder = spec.build(self.lm)
        self.load_seconds = round(time.perf_counter() - self.started, 2)
        self.name = f"{os.uname().nodename}:{os.getpid()}"

    def decode(self, chunk: Chunk) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        from dsgen.generation.chunks import decode_chunk

        started = time.perf_counter()
        rows, work = decode_chunk(self.decoder, chunk)
        return rows, {"worker": self.name, "seconds": round(time.perf_counter() - started, 3),
                      "model_load_seconds": self.load_seconds, **work}


class RayBackend(Backend):
    """Decode chunks on Ray actors.

    Args:
        address: ``None`` (start a local Ray for the run), ``auto`` or ``HOST:PORT``.
        workers: number of actors (default: one per visible GPU with ``device`` cuda, else 2).
        device: ``cpu``, ``cuda`` or ``auto`` (cuda when the cluster has GPUs).
        max_restarts: how often a dead actor is restarted (its chunk is retried each time).
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, device: str = "auto",
                 max_restarts: int = 3) -> None:
        self.ray = import_ray()
        self.address = address
        self.workers = workers
        self.device = device
        self.max_restarts = max_restarts

    def _init(self) -> bool:
        """Connect or start Ray; True when this run started it (and should stop it)."""
        ray = self.ray
        if ray.is_initialized():
            return False
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
                                  "runtime_env": {"env_vars": env} if env else None}
        try:
            if self.address:
                ray.init(address=self.address, **kwargs)
            else:
                ray.init(num_cpus=os.cpu_count() or 1, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise DsgenError(f"cannot start or reach Ray ({self.address or 'local'}): {str(exc).splitlines()[0]}") from None
        return True

    def run(self, spec: DecoderSpec, chunks: list[Chunk], on_done: ChunkDone,
            advance: Callable[[float], None]) -> BackendReport:
        ray = self.ray
        started_here = self._init()
        try:
            resources = ray.cluster_resources()
            gpus = int(resources.get("GPU", 0))
            cuda = self.device == "cuda" or (self.device == "auto" and gpus > 0)
            if cuda and gpus == 0:
                raise DsgenError("--device cuda was asked for but the Ray cluster has no GPU; use --device cpu")
            n = self.workers or (gpus if cuda else 2)
            cpus = int(resources.get("CPU", 1))
            threads = None if cuda else max(1, cpus // n)
            device = "cuda" if cuda else "cpu"
            worker_spec = DecoderSpec(spec.generator, device, spec.dtype, spec.sampling, spec.max_rows, spec.close_quote,
                                      spec.allow_newlines, spec.keep_unclosed)
            actor = ray.remote(num_cpus=0 if cuda else threads, num_gpus=1 if cuda else 0,
                               max_restarts=self.max_restarts, max_task_retries=self.max_restarts)(ChunkWorker)
            report = BackendReport(self.name, n, {})
            if not chunks:
                return report
            actors = [actor.remote(worker_spec, threads) for _ in range(min(n, len(chunks)))]
            queue = list(chunks)
            running: dict[Any, tuple[Any, Chunk]] = {}

            def submit(a: Any) -> None:
                chunk = queue.pop(0)
                running[a.decode.remote(chunk)] = (a, chunk)

            for a in actors:
                if queue:
                    submit(a)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                a, chunk = running.pop(ready[0])
                try:
                    rows, timing = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    raise DsgenError(f"chunk {chunk.index} failed on Ray after {self.max_restarts} retries: "
                                     f"{str(exc).splitlines()[0]}") from None
                on_done(chunk, rows, timing)
                advance(chunk.target)
                w = report.per_worker.setdefault(timing["worker"], {"chunks": 0, "seconds": 0.0})
                w["chunks"] += 1
                w["seconds"] = round(w["seconds"] + timing["seconds"], 3)
                if queue:
                    submit(a)
            return report
        finally:
            if started_here:
                ray.shutdown()
