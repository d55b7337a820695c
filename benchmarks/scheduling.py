"""Scheduling: one comparison on the local scheduler (one process) and on a Ray cluster of this machine, side by side
in one run, printed as ratios.

The same methods, preset and seeds run twice from empty output folders (the model files and the evaluation data
are read from the same disk cache both times): once with the ``local`` scheduler (today's way: one process, the
preset's default of :data:`dsgen.scheduling.base.DEFAULT_THREADS` threads), once with the ``ray`` scheduler on a
``ray.cluster_utils.Cluster`` of ``--nodes`` nodes of ``--cpus`` CPUs each (a head without CPUs takes no task).

Printed, all measured in this run:
- wall time of both and their ratio (local / Ray: the speed-up);
- what the scheduling adds to each task: its wall time seen by the driver minus its own time on the worker
  (shipping its inputs and outputs through Ray's object store, a worker's scratch folder, the driver's writes),
  per kind and as a share of the tasks' own time;
- the cost model: ``runs x minutes per run / workers`` with the minutes per run measured by the local run
  (its wall time over its runs, datasets and fits included), against the Ray wall time measured;
- the peak resident memory each kind of task reached (what its tasks declare to Ray after the first);
- the machine's load (``os.getloadavg``) before and after: on a shared machine the ratios move with it;
- whether the datasets are byte-identical and the scores identical (datasets always; scores when both ran on the
  same number of threads, ``--cpus`` equal to the local run's: training's bits depend on the count).

Run: ``dsgen bench scheduling [dino dino-decay0 human base] [--preset smoke] [--seeds 1,2] [--nodes 2]``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _same(a: Path, b: Path) -> dict[str, bool]:
    """Whether two output folders hold the same datasets (bytes) and the same scores (every result's tasks)."""
    from dsgen.evaluation.results import Result

    def files(root: Path, pattern: str) -> dict[Path, Path]:
        return {p.relative_to(root): p for p in root.rglob(pattern) if ".failed" not in p.name}

    da, db = files(a / "cache" / "datasets", "*.jsonl"), files(b / "cache" / "datasets", "*.jsonl")
    ra, rb = files(a / "results", "data-*-seed-*.json"), files(b / "results", "data-*-seed-*.json")
    return {"datasets": bool(da) and da.keys() == db.keys() and all(da[k].read_bytes() == db[k].read_bytes() for k in da),
            "scores": bool(ra) and ra.keys() == rb.keys() and all(Result.load(ra[k]).tasks == Result.load(rb[k]).tasks
                                                                 for k in ra)}


def _per_kind(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({r["kind"] for r in records}):
        rs = [r for r in records if r["kind"] == kind]
        own = sum(r["task_seconds"] for r in rs)
        overheads = [r.get("overhead_seconds", 0.0) for r in rs]
        out[kind] = {"tasks": len(rs), "task_seconds": round(own, 1),
                     "overhead_mean": round(statistics.mean(overheads), 3),
                     "overhead_median": round(statistics.median(overheads), 3),
                     "overhead_share": round(sum(overheads) / own, 4) if own else 0.0,
                     "peak_rss_gb": round(max((r.get("peak_rss") or 0) for r in rs) / 1024 ** 3, 2)}
    return out


def run(preset: str = "smoke", methods: tuple[str, ...] = ("dino", "dino-decay0", "human", "base"),
        seeds: str | None = "1,2", data_seeds: str | None = None, nodes: int = 2, cpus: int = 1,
        out: Path = Path("runs/bench/scheduling"), data_dir: str | None = None,
        json_out: Path | None = None) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.presets import load_preset, parse_seeds
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.scheduling.base import DEFAULT_THREADS
    from dsgen.scheduling.local import LocalScheduler
    from dsgen.scheduling.ray_scheduler import RayScheduler

    console = make_console()
    p = load_preset(preset)
    runs = p.runs(parse_seeds(seeds, None), parse_seeds(data_seeds, None, "--data-seeds"))
    n_runs = len(methods) * len(runs)
    for folder in ("local", "ray"):
        shutil.rmtree(out / folder, ignore_errors=True)
    result: dict[str, Any] = {"preset": p.name, "methods": list(methods), "runs": n_runs, "nodes": nodes,
                              "cpus_per_node": cpus, "local_threads": DEFAULT_THREADS, "load_before": _load()}

    local = LocalScheduler()
    started = time.perf_counter()
    run_many(list(methods), p, runs, Runner(out / "local", data_dir, progress=False, threads=DEFAULT_THREADS),
             failures=[], scheduler=local)
    result["local_seconds"] = round(time.perf_counter() - started, 1)
    result["local_tasks"] = _per_kind(local.records)
    result["load_between"] = _load()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus, object_store_memory=500 * 1024 ** 2)
    cluster.wait_for_nodes()
    # the nodes are this machine's processes: they read the driver's --data-dir (else its DSGEN_DATA_DIR, inherited)
    env = {"DSGEN_DATA_DIR": str(Path(data_dir).absolute())} if data_dir else {}
    ray.init(address=cluster.address, log_to_driver=False, runtime_env={"env_vars": env} if env else None)
    try:
        scheduler = RayScheduler(cpus_per_worker=cpus)
        started = time.perf_counter()
        run_many(list(methods), p, runs, Runner(out / "ray", data_dir, progress=False, threads=cpus), failures=[],
                 scheduler=scheduler)
        result["ray_seconds"] = round(time.perf_counter() - started, 1)
        result["ray_tasks"] = _per_kind(scheduler.records)
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["load_after"] = _load()
    result["speedup"] = round(result["local_seconds"] / result["ray_seconds"], 2)
    minutes_per_run = result["local_seconds"] / 60 / n_runs
    result["cost_model"] = {"minutes_per_run": round(minutes_per_run, 3),
                            "predicted_ray_seconds": round(n_runs * minutes_per_run * 60 / nodes, 1)}
    result["cost_model"]["measured_over_predicted"] = round(result["ray_seconds"] / result["cost_model"]
                                                            ["predicted_ray_seconds"], 2)
    result["same"] = _same(out / "local", out / "ray")

    from rich.table import Table

    table = Table(title=f"compare {', '.join(methods)} on {p.name}: {n_runs} runs, local vs Ray ({nodes} x {cpus} CPU)")
    for col in ("kind", "tasks", "local s", "ray own s", "overhead mean s", "overhead / own", "peak GB"):
        table.add_column(col, justify="right" if col != "kind" else "left")
    for kind, r in result["ray_tasks"].items():
        table.add_row(kind, str(r["tasks"]), str(result["local_tasks"].get(kind, {}).get("task_seconds", "-")),
                      str(r["task_seconds"]), f"{r['overhead_mean']:.3f}", f"{r['overhead_share']:.2%}",
                      f"{r['peak_rss_gb']:.2f}")
    console.print(table)
    model = result["cost_model"]
    console.print(f"wall: local {result['local_seconds']} s, Ray {result['ray_seconds']} s: speed-up "
                  f"[bold]{result['speedup']}x[/bold] on {nodes} nodes")
    console.print(f"cost model: {n_runs} runs x {model['minutes_per_run']:.3f} min / {nodes} workers = "
                  f"{model['predicted_ray_seconds']} s; measured / predicted {model['measured_over_predicted']}")
    console.print(f"same datasets: {result['same']['datasets']}; same scores: {result['same']['scores']} (local "
                  f"{DEFAULT_THREADS} threads, Ray {cpus}); load {result['load_before']} -> {result['load_between']} "
                  f"-> {result['load_after']}")
    if json_out:
        write_json(json_out, result)
    return result
