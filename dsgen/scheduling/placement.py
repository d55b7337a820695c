"""Where a command's work runs (``--backend local|ray`` and its Ray settings), checked in one place for every command.

| setting | ``local`` | ``ray`` |
| --- | --- | --- |
| ``backend`` | this process | a Ray cluster (``pip install 'dsgen[ray]'``) |
| ``address`` | refused | ``auto`` or ``HOST:PORT`` (default: ``$RAY_ADDRESS``, else a local Ray for the command) |
| ``workers`` | refused | the most workers at once (below) |
| ``cpus_per_worker`` | the threads this process computes with | the threads each worker computes with, and the CPUs it reserves |

A *worker* is where one piece of the work computes: for a comparison (``run``, ``compare``, ``curve``, ``claims``) a
task that makes one artefact (a dataset, a data-level fit, a run; :mod:`dsgen.scheduling`), for ``generate`` an actor
that decodes chunks of one dataset (:mod:`dsgen.generation.ray_backend`).

``cpus_per_worker`` has one meaning on both backends, the threads a worker computes with, so that
``--backend local --cpus-per-worker 2`` is valid everywhere. A comparison's tasks compute on
:data:`~dsgen.scheduling.base.DEFAULT_THREADS` when it is not given, whichever backend runs them: training's bits
depend on the count, so results record it and run keys hold it. Generation's output does not depend on the count (the
decode step is thread-invariant where its probe says so), so ``generate`` leaves it to torch here and to what the
nodes can give every actor on Ray when it is not given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dsgen.errors import DsgenError


@dataclass(frozen=True)
class Placement:
    """The backend and Ray settings of a command (see the module docstring); :meth:`check` gives a one-line
    :class:`~dsgen.errors.DsgenError` for any bad combination before any work."""

    backend: str = "local"
    address: str | None = None
    workers: int | None = None
    cpus_per_worker: int | None = None

    def check(self, registry: Any = None) -> "Placement":
        """Every setting checked: the backend is one ``registry`` knows (default: the schedulers; ``generate`` checks
        against the generation backends, which name the same two), counts are at least 1, ``address`` and
        ``workers`` come with ``ray``, and ``ray`` is installed. Returns itself."""
        if registry is None:
            from dsgen.scheduling import SCHEDULERS as registry
        if self.backend not in registry:
            raise DsgenError(registry.unknown_message(self.backend))
        for name, value in (("--workers", self.workers), ("--cpus-per-worker", self.cpus_per_worker)):
            if value is not None and value < 1:
                raise DsgenError(f"{name} must be at least 1 (got {value})")
        if self.backend == "local" and (self.address is not None or self.workers is not None):
            raise DsgenError("--address and --workers need --backend ray")
        if self.backend == "ray":
            from dsgen.generation.ray_backend import import_ray

            import_ray()  # a one-line error naming pip install 'dsgen[ray]'
        return self

    @property
    def threads(self) -> int:
        """The threads every task of a comparison computes with (the runner's ``threads``, part of run keys)."""
        from dsgen.scheduling.base import DEFAULT_THREADS

        return self.cpus_per_worker or DEFAULT_THREADS

    def scheduler(self, device: str | None = None) -> Any:
        """The scheduler of a comparison's tasks (None: ``local``); ``device`` is the command's (``cuda``: a GPU per
        Ray task)."""
        self.check()
        if self.backend == "local":
            return None
        from dsgen.scheduling.ray_scheduler import RayScheduler

        return RayScheduler(address=self.address, workers=self.workers, device=device,
                            cpus_per_worker=self.cpus_per_worker)

    def generation_backend(self, device: str | None = None) -> Any:
        """The backend that decodes ``generate``'s chunks (None: ``local``, this process; see :meth:`computing`)."""
        from dsgen.generation.backends import BACKENDS

        self.check(BACKENDS)
        if self.backend == "local":
            return None
        from dsgen.generation.ray_backend import RayBackend

        return RayBackend(address=self.address, workers=self.workers, device=device or "auto",
                          cpus_per_worker=self.cpus_per_worker)

    @contextlib.contextmanager
    def computing(self) -> Iterator[None]:
        """The block computes on ``cpus_per_worker`` threads when the work runs in this process (``local``), as a Ray
        worker would; unchanged when it is not given or the work runs on Ray."""
        from dsgen.scheduling.tasks import torch_threads

        with torch_threads(self.cpus_per_worker if self.backend == "local" else None):
            yield


__all__ = ["Placement"]
