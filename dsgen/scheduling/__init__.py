"""Scheduling a comparison: its runs as a graph of artefacts (:mod:`dsgen.scheduling.graph`), executed by a scheduler.

| scheduler | where tasks run | who writes under ``--out`` |
| --- | --- | --- |
| ``local`` (:mod:`~dsgen.scheduling.local`) | this process, one at a time, in plan order | this process, in place |
| ``ray`` (:mod:`~dsgen.scheduling.ray_scheduler`) | Ray tasks on a cluster's nodes, each with the resources it declares | the driver, from the files a worker returns |

``dsgen run``, ``compare``, ``curve`` and ``claims`` take ``--backend local|ray``; ``dsgen generate --backend ray``
spreads one dataset's chunks over Ray actors instead (:mod:`dsgen.generation.ray_backend`). Every command's
``--backend`` and Ray settings are checked, and the scheduler or generation backend built, by
:class:`~dsgen.scheduling.placement.Placement`.
"""

from __future__ import annotations

from typing import Any

from dsgen.registry import Registry
from dsgen.scheduling.graph import Graph, run_plans

SCHEDULERS: Registry[Any] = Registry("scheduler")
SCHEDULERS.add("local", "dsgen.scheduling.local:LocalScheduler")
SCHEDULERS.add("ray", "dsgen.scheduling.ray_scheduler:RayScheduler")

__all__ = ["Graph", "SCHEDULERS", "run_plans"]
