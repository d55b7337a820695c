"""Generation on a Ray cluster (``dsgen generate --backend ray``): each worker is an actor that loads the model once
and decodes chunks of one dataset. The commands that run methods (``run``, ``compare``, ``curve``, ``claims``) fan
out whole tasks instead, datasets among them (:mod:`dsgen.scheduling.ray_scheduler`).

Self-debiasing couples only the rows of one (input, label) group, so generation shards by input
with no communication: the driver hands chunks to actors, each chunk decodes with its own seed,
and the driver writes each finished chunk atomically into the same ``<out>.partial/`` layout the
local backend uses. The final file is therefore the same whichever backend, worker count or
finishing order. A worker killed mid-chunk is restarted by Ray and its chunk retried
(``max_restarts`` / ``max_task_retries``); the driver killed mid-run resumes from the chunks
already on disk, with either backend.

``ray`` is an optional extra: ``pip install 'dsgen[ray]'``. Without ``--address`` a local Ray is
started for the run (and stopped after it); ``--address auto`` or ``HOST:PORT`` joins a cluster.
With ``--device cuda`` each actor takes one GPU; on CPUs each actor takes as many cores as the
nodes can give every actor (:func:`actor_cpus`, from each node's own CPUs, not the cluster's sum),
or ``--cpus-per-worker``. The actors' resources are reserved first (a placement group): a request
the cluster cannot place within ``placement_timeout`` seconds is a one-line error, not a wait
without end.
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


def connect_ray(ray: Any, address: str | None, env: dict[str, str]) -> bool:
    """Join the Ray cluster at ``address``, or start a Ray of this machine (all its CPUs) when None, with ``env`` set
    in every worker; False when this process was connected already (then nothing is done), a one-line error when Ray
    cannot be started or reached. Serves ``dsgen generate --backend ray`` and the ``ray`` scheduler."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False,
                              "runtime_env": {"env_vars": env} if env else None}
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # "local": without it Ray joins the cluster last started on this machine (/tmp/ray/ray_current_cluster)
            ray.init(address="local", num_cpus=os.cpu_count() or 1, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise DsgenError(f"cannot start or reach Ray ({address or 'local'}): {str(exc).splitlines()[0]}") from None
    return True


def actor_cpus(node_cpus: list[float], workers: int) -> int:
    """The most CPUs each of ``workers`` actors can have so that all of them fit on the nodes (each
    node holds ``floor(cpus / c)`` actors of ``c`` CPUs); at least 1. On 4 nodes of 8 CPUs, 2 actors
    get 8 each and 8 actors 4 each; on one 2-CPU machine, 2 actors get 1 each."""
    for c in range(int(max(node_cpus, default=1)), 0, -1):
        if sum(int(n // c) for n in node_cpus) >= workers:
            return c
    return 1


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise DsgenError("--backend ray needs Ray; install it with: pip install 'dsgen[ray]'") from None
    return ray


def ray_failure(ray: Any, exc: Exception, chunk: int, max_restarts: int) -> str:
    """One true line for a chunk that failed on Ray: an error of the decoding itself is raised once
    (Ray retries only lost workers), a worker lost more often than it may restart is said so."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = getattr(exc, "cause", None)
        what = f"{type(cause).__name__}: {cause}" if cause is not None else first
        return f"chunk {chunk} failed in its Ray worker (an error of the decoding, not retried): {what.splitlines()[0]}"
    if isinstance(exc, ray.exceptions.RayActorError):
        return (f"chunk {chunk} lost its Ray worker and the worker may restart only {max_restarts} times: {first}")
    return f"chunk {chunk} failed on Ray: {first}"


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
        cpus_per_worker: CPUs (and threads) of each actor (default: :func:`actor_cpus`).
        max_restarts: how often a dead actor is restarted (its chunk is retried each time; an error
            raised by the decoding itself is not retried).
        placement_timeout: seconds to wait for the cluster to reserve the actors' resources.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, device: str = "auto",
                 max_restarts: int = 3, cpus_per_worker: int | None = None, placement_timeout: float = 60.0) -> None:
        self.ray = import_ray()
        self.address = address or os.environ.get("RAY_ADDRESS") or None  # RAY_ADDRESS works like --address
        self.workers = workers
        self.device = device
        self.max_restarts = max_restarts
        self.cpus_per_worker = cpus_per_worker
        self.placement_timeout = placement_timeout

    def _reserve(self, bundles: list[dict[str, float]]) -> Any:
        """A placement group holding every actor's resources, or a one-line error when the cluster
        cannot give them within ``placement_timeout``."""
        ray = self.ray
        from ray.util.placement_group import placement_group, remove_placement_group

        group = placement_group(bundles, strategy="SPREAD")
        try:
            ray.get(group.ready(), timeout=self.placement_timeout)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
            have = ", ".join(f"{int(r.get('CPU', 0))} CPU" + (f" + {int(r['GPU'])} GPU" if r.get("GPU") else "")
                             for r in nodes) or "no nodes"
            raise DsgenError(f"Ray could not place {len(bundles)} workers of {bundles[0]} within "
                             f"{self.placement_timeout:g} s (nodes: {have}); ask for fewer with --workers or "
                             "--cpus-per-worker") from None
        return group

    def _init(self) -> bool:
        """Connect or start Ray; True when this run started it (and should stop it)."""
        return connect_ray(self.ray, self.address, {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ})

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
            node_cpus = [float(nd.get("Resources", {}).get("CPU", 0)) for nd in ray.nodes() if nd.get("Alive")]
            threads = None if cuda else (self.cpus_per_worker or actor_cpus(node_cpus, n))
            device = "cuda" if cuda else "cpu"
            worker_spec = DecoderSpec(spec.generator, device, spec.dtype, spec.sampling, spec.max_rows, spec.output,
                                      spec.allow_newlines, spec.keep_unclosed)
            report = BackendReport(self.name, n, {})
            if not chunks:
                return report
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            n_actors = min(n, len(chunks))
            group = self._reserve([{"GPU": 1.0} if cuda else {"CPU": float(threads)}] * n_actors)
            actor = ray.remote(num_cpus=0 if cuda else threads, num_gpus=1 if cuda else 0,
                               max_restarts=self.max_restarts, max_task_retries=self.max_restarts)(ChunkWorker)
            actors = [actor.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote(worker_spec, threads)
                      for i in range(n_actors)]
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
                    raise DsgenError(ray_failure(ray, exc, chunk.index, self.max_restarts)) from None
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
