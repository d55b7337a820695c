"""The ``ray`` scheduler: a comparison's tasks (datasets, data-level fits, runs) as Ray tasks on a cluster.

Each task declares what it needs: ``--cpus-per-worker`` CPUs (default :data:`~dsgen.scheduling.base.DEFAULT_THREADS`;
torch in the task computes on as many threads, as a local run does with the same option),
one GPU with ``--device cuda``, and memory (:func:`declared_memory`, from the peak resident memory measured for
tasks of its kind). Ray places each on any node with room, so nodes of different sizes are all used (a 4-CPU
node runs four 1-CPU tasks at once); the driver keeps as many tasks started as the live nodes hold (or
``--workers``). ``--address auto | HOST:PORT`` (or ``RAY_ADDRESS``) joins a running cluster; without it a local Ray
starts with the command and stops with it.

**The driver owns the output folder.** A worker makes its task in a scratch folder of its own
(``$DSGEN_SCRATCH_DIR`` or the system's temporary folder) holding a copy of what the task reads, shipped through
Ray's object store (the datasets, the fits, an API judge's cache), and returns the files it wrote; the driver writes
them under ``--out``, each atomically and the file that marks an artefact whole last (a dataset's sidecar, a fit's
``fit.json``, a result's JSON), in the layout the ``local`` scheduler writes. No shared filesystem is needed, and a
task killed half-way leaves nothing. What a task printed is its log under ``--out/logs/`` (a run's beside its
traceback, if it crashed).

**Each node reads its own data and models** (its ``DSGEN_DATA_DIR``, its model cache): before any task, every node
is asked for the fingerprints of the evaluation data and of the models the comparison uses, and a node whose
fingerprints differ from the driver's is refused with one line; every task checks again that it computes the
driver's key for its artefact (:class:`dsgen.runs.records.KeyMismatch`), so no node's results are mixed in.

**Faults.** A worker or node lost mid-task costs that task: Ray starts it again elsewhere, up to ``MAX_RETRIES``
times; each task is deterministic, so the result is the one an uninterrupted run gives. A run that fails on its
data (:class:`dsgen.runs.records.RunFailed`) is an answer, not a fault, and is never retried. A driver killed
mid-comparison leaves only whole artefacts under ``--out``; the next command reuses them, with either scheduler.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from dsgen.errors import DsgenError
from dsgen.scheduling.base import DEFAULT_THREADS, Scheduler
from dsgen.scheduling.tasks import CRASHED, DONE, FAILED, DatasetTask, Outcome, RunTask, Task

MAX_RETRIES = 3  # how often Ray starts a task again whose worker or node was lost
GB = 1024 ** 3
# Peak resident memory of a task's worker process, measured on the smoke and cpu presets (SmolLM2-135M generator,
# smollm2-l4 encoder, all-MiniLM-L6-v2 SDI backbone; benchmarks/scheduling.py prints what it measures): what a task
# declares before a task of its kind has been measured in this comparison.
MEASURED_PEAK = {"dataset": 2.0 * GB, "fit": 2.0 * GB, "run": 2.5 * GB}
MEMORY_MARGIN = 1.25  # declared = margin x the largest peak measured for the kind
SCRATCH_ENV = "DSGEN_SCRATCH_DIR"


def import_ray() -> Any:
    from dsgen.generation.ray_backend import import_ray as load

    return load()


def declared_memory(kind: str, measured: dict[str, int], largest_node: float | None) -> int:
    """The memory a task of ``kind`` declares: :data:`MEMORY_MARGIN` x the largest peak measured for its kind in this
    comparison (before any, :data:`MEASURED_PEAK`), never more than the largest live node holds (so it can run)."""
    peak = measured.get(kind) or MEASURED_PEAK[kind]
    want = int(peak * MEMORY_MARGIN)
    return int(min(want, largest_node)) if largest_node else want


def task_slots(nodes: list[dict[str, float]], cpus: int, gpu: bool) -> int:
    """How many tasks of ``cpus`` CPUs (and one GPU each when ``gpu``) the nodes hold at once, node by node (a
    2-CPU node and a 1-CPU node hold three 1-CPU tasks, one 2-CPU task... not the cluster's sum divided)."""
    if gpu:
        return sum(int(min(n.get("GPU", 0), n.get("CPU", 0) // cpus)) for n in nodes)
    return sum(int(n.get("CPU", 0) // cpus) for n in nodes)


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker needs of the driver: the output folder the records name, threads, data folder and options."""

    out: str
    threads: int
    data_dir: str | None
    save_models: bool
    auto_device: str | None = None  # what a stage's device "auto" is on this task's resources (part of run keys)


def commit_last(relative: str) -> bool:
    """Whether a file marks its artefact whole and is therefore written last: a dataset's sidecar, a fit's
    ``fit.json``, a run's result JSON (its predictions, pairs and model are written before it)."""
    name = relative.rsplit("/", 1)[-1]
    if name.endswith(".meta.json") or name == "fit.json":
        return True
    # a result sits at results/<preset>/<method>/<variant>/<run>.json; the JSON files of its kept model folder
    # (<run>.model/config.json, ...) are parts written before it
    parts = relative.split("/")
    return (parts[0] == "results" and len(parts) == 5 and name.endswith(".json")
            and not name.endswith(".failed.json"))


def read_tree(root: Path, relative: Path) -> dict[str, bytes]:
    """Every file of ``root / relative`` (a file, with a dataset's sidecar, or a folder), by path relative to
    ``root``; nothing when it does not exist."""
    from dsgen.artifacts import sidecar_path

    target = root / relative
    if target.is_dir():
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(target.rglob("*")) if p.is_file()}
    files = {}
    for path in (target, sidecar_path(target)):
        if path.is_file():
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Write ``files`` under ``root``, each atomically, the files that mark an artefact whole last."""
    from dsgen.artifacts import atomic_open

    for relative in sorted(files, key=commit_last):
        target = root / relative
        if Path(relative).is_absolute() or ".." in Path(relative).parts:
            raise DsgenError(f"a worker returned a file outside the output folder: {relative}")
        with atomic_open(target, "wb") as fh:
            fh.write(files[relative])


# -- the worker side ----------------------------------------------------------------------------------------------

_EVALUATORS: dict[Any, Any] = {}  # a worker process reads the evaluation data once, for every task it runs


@contextmanager
def captured(path: Path) -> Iterator[None]:
    """Send what this process prints (file descriptors 1 and 2: Python, C libraries, warnings) to ``path``."""
    import sys

    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with path.open("wb") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (Linux: ``/proc/self/clear_refs``); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss(reset: bool) -> int | None:
    """The peak resident memory of this process in bytes: since :func:`reset_peak_rss` where it worked, else over the
    process's life (an upper bound for the task)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if not reset:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return None


def sendable(exc: BaseException) -> BaseException:
    """``exc`` as it can travel back to the driver: its traceback's text kept (``remote_traceback``, which a run's log
    shows), and an exception that does not pickle replaced by a RuntimeError saying what it was."""
    import pickle
    import traceback

    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception a library raises may fail to pickle
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    exc.remote_traceback = text  # type: ignore[attr-defined]
    return exc


def execute_on_worker(task: Task, settings: WorkerSettings, *shipped: dict[str, bytes]) -> Outcome:
    """The body of every Ray task: a scratch folder with what the task reads, a worker's runner over it (it makes
    only the task's own artefact), what the task printed kept as its log, and the files it wrote returned."""
    import shutil
    import tempfile

    from dsgen.runs.pipeline import Runner
    from dsgen.scheduling.tasks import execute

    node = _node_id()[:8]
    root = os.environ.get(SCRATCH_ENV) or None
    if root:
        Path(root).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"dsgen-{task.kind}-{node}-", dir=root))
    try:
        for files in shipped:
            for relative, data in files.items():
                (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
                (scratch / relative).write_bytes(data)
        before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in scratch.rglob("*") if p.is_file()}
        runner = Runner(scratch, settings.data_dir, progress=False, save_models=settings.save_models,
                        makes=(task.kind,) if task.kind != "run" else (), shown_out=settings.out,
                        threads=settings.threads, evaluators=_EVALUATORS, lock=False)  # its own scratch folder
        runner.data.auto_device = settings.auto_device
        output = scratch / ".task-output.log"
        reset = reset_peak_rss()
        with captured(output):
            outcome = execute(task, runner)
        outcome.peak_rss = peak_rss(reset)
        outcome.where = f"{outcome.where} node {node}"
        if outcome.error is not None:
            outcome.error = sendable(outcome.error)
        printed = output.read_text(encoding="utf-8", errors="replace")
        output.unlink()
        log = scratch / task.log()
        if printed.strip():  # beside the traceback of a run that crashed, or alone
            kept = log.read_text(encoding="utf-8") + "\n--- what the task printed ---\n" if log.exists() else ""
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(kept + printed, encoding="utf-8")
        outcome.files = {p.relative_to(scratch).as_posix(): p.read_bytes() for p in sorted(scratch.rglob("*"))
                         if p.is_file() and before.get(p) != (p.stat().st_size, p.stat().st_mtime_ns)}
        outcome.value = None  # the driver reads the result from the files it writes
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() or "local"
    except Exception:  # noqa: BLE001 - outside Ray
        return "local"


def node_fingerprints(evaluations: list[tuple[tuple[str, ...], str]], models: list[str],
                      data_dir: str | None) -> dict[str, Any]:
    """What a node runs and reads: its package versions and dsgen's code (:func:`dsgen.artifacts.code_versions`), the
    fingerprint of each evaluation (tasks, text convention) and of each model, as this node's data folder and model
    cache give them (an error's line where one cannot be read)."""
    import socket

    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.models import model_fingerprint

    def safely(make: Any) -> Any:
        try:
            return make()
        except DsgenError as exc:
            return {"error": str(exc).splitlines()[0]}

    from dsgen.artifacts import code_versions

    return {"versions": code_versions(),
            "evaluation": {f"{','.join(t)}|{p}": safely(lambda t=t, p=p: StsEvaluator(list(t), data_dir, preprocess=p)
                                                          .fingerprint()) for t, p in evaluations},
            "models": {m: safely(lambda m=m: model_fingerprint(m)) for m in models},
            "data_dir": data_dir or os.environ.get("DSGEN_DATA_DIR"), "host": socket.gethostname()}


def version_difference(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """The first way a node's :func:`dsgen.artifacts.code_versions` differ from the driver's, in words; None when they
    are the same."""
    for name, version in ours.items():
        got = theirs.get(name)
        if got == version:
            continue
        if name == "dsgen_code":
            return f"dsgen code differs from the driver's (source hash {got}, the driver's {version})"
        return f"{name} {got or 'not installed'} differs from the driver's {version}"
    return None


# -- the driver side ----------------------------------------------------------------------------------------------

class RayScheduler(Scheduler):
    """Run a comparison's tasks on Ray (see the module docstring).

    Args:
        address: None (a local Ray for the command, or ``RAY_ADDRESS``), ``auto`` or ``HOST:PORT``.
        workers: most tasks started at once (default: as many as the live nodes hold).
        device: ``cuda``: every task takes one GPU; otherwise tasks run on CPUs.
        cpus_per_worker: CPUs of each task, and torch's threads in it (default :data:`DEFAULT_THREADS`).
        max_retries: how often Ray starts again a task whose worker or node was lost.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, device: str | None = None,
                 cpus_per_worker: int | None = None, max_retries: int = MAX_RETRIES) -> None:
        self.ray = import_ray()
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.workers, self.device, self.max_retries = workers, device or "auto", max_retries
        self.cpus = cpus_per_worker or DEFAULT_THREADS
        self.cuda = self.device == "cuda"
        self.runner: Any = None
        self.inflight: dict[Any, tuple[Task, float]] = {}
        self.records: list[dict[str, Any]] = []  # one per finished task: kind, wall and own seconds, node, peak memory
        self.peaks: dict[str, int] = {}
        self._shipped: dict[str, Any] = {}
        self._connected_here = self._started_here = False
        self._nodes_at = 0.0
        self._nodes: list[dict[str, float]] = []

    # -- the cluster -----------------------------------------------------------------------------------------------
    def _connect(self, data_dir: str | None) -> None:
        from dsgen.generation.ray_backend import FORWARDED_ENV, connect_ray

        env: dict[str, str] = {}
        if not self.address:  # a Ray of this machine for the command: its workers read the driver's settings and data
            env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
            if data_dir:
                env["DSGEN_DATA_DIR"] = str(Path(data_dir).absolute())
        # on a cluster every node reads its own data folder and models (checked by fingerprint before any task)
        self._connected_here = connect_ray(self.ray, self.address, env)
        self._started_here = self._connected_here and not self.address

    def nodes(self, fresh: bool = False) -> list[dict[str, Any]]:
        """The live nodes (id, address, resources), asked of Ray at most every 2 s."""
        if fresh or time.monotonic() - self._nodes_at > 2.0:
            self._nodes = [{"id": n["NodeID"], "address": n.get("NodeManagerAddress", "?"), **n.get("Resources", {})}
                           for n in self.ray.nodes() if n.get("Alive")]
            self._nodes_at = time.monotonic()
        return self._nodes

    def _check_nodes(self, plans: list[Any]) -> None:
        """Refuse, in one line, a node whose package versions, dsgen code, evaluation data or models differ from the
        driver's."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from dsgen.artifacts import code_versions
        from dsgen.models import model_fingerprint

        evaluations = sorted({(tuple(p.evaluation["tasks"]), p.evaluation["preprocess"]) for p in plans})
        models = sorted({m for p in plans for m in p.models()})
        ours = {"evaluation": {f"{','.join(t)}|{p}": self.runner.evaluator(
                    next(x for x in plans if (tuple(x.evaluation["tasks"]), x.evaluation["preprocess"]) == (t, p))
                ).fingerprint() for t, p in evaluations},
                "models": {m: model_fingerprint(m) for m in models}}
        check = self.ray.remote(num_cpus=0, max_retries=0)(node_fingerprints)
        usable = [n for n in self.nodes(fresh=True) if n.get("CPU", 0) >= self.cpus and (not self.cuda or n.get("GPU"))]
        refs = {check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["id"], soft=False)).remote(
            evaluations, models, self.settings.data_dir): n for n in usable}
        try:
            answers = dict(zip(refs, self.ray.get(list(refs), timeout=600)))
        except self.ray.exceptions.GetTimeoutError:
            raise DsgenError("a Ray node did not say which evaluation data and models it reads within 600 s") from None
        for ref, theirs in answers.items():
            node = refs[ref]
            refused = version_difference(code_versions(), theirs.get("versions") or {})
            if refused:
                raise DsgenError(f"Ray node {node['address']} ({theirs['host']}) refused: its {refused}; install the "
                                 "driver's dsgen (the same checkout or wheel) and libraries on every node, or leave it "
                                 "out of the cluster")
            for what in ("evaluation", "models"):
                for name, fingerprint in ours[what].items():
                    if theirs[what].get(name) != fingerprint:
                        got = theirs[what].get(name)
                        said = got["error"] if isinstance(got, dict) and "error" in got else f"fingerprint {got}"
                        label = "evaluation data" if what == "evaluation" else f"model {name}"
                        raise DsgenError(
                            f"Ray node {node['address']} ({theirs['host']}) refused: its {label} differ from the driver's "
                            f"({said}, the driver's {fingerprint}; its DSGEN_DATA_DIR: {theirs['data_dir']}); give every "
                            "node the same data pack and models, or leave it out of the cluster")

    # -- Scheduler ------------------------------------------------------------------------------------------------
    def start(self, runner: Any, plans: list[Any]) -> None:
        self.runner = runner
        if runner.threads is None:  # a task computes on the CPUs it reserves, and the run keys name that count
            runner.threads = self.cpus
        # a stage's device "auto" is what a task gets: one GPU with --device cuda, else CPUs only (Ray hides the GPUs
        # of a task that asks for none), whatever the driver's own machine has; the run keys name it
        runner.data.auto_device = "cuda" if self.cuda else "cpu"
        self._connect(runner.data_dir)
        self.settings = WorkerSettings(out=str(Path(runner.out).absolute()), threads=runner.threads or self.cpus,
                                       data_dir=runner.data_dir if self._started_here else None,  # else the node's
                                       save_models=runner.save_models, auto_device=runner.data.auto_device)
        if self.cuda and not any(n.get("GPU") for n in self.nodes(fresh=True)):
            raise DsgenError("--device cuda was asked for but the Ray cluster has no GPU; use --device cpu")
        if not self.capacity():
            have = ", ".join(f"{int(n.get('CPU', 0))} CPU" + (f" + {int(n['GPU'])} GPU" if n.get("GPU") else "")
                             for n in self.nodes()) or "no nodes"
            raise DsgenError(f"no Ray node can take a task of {self.cpus} CPUs{' and 1 GPU' if self.cuda else ''} "
                             f"(nodes: {have}); ask for fewer with --cpus-per-worker")
        self._check_nodes(plans)

    def capacity(self) -> int:
        slots = task_slots(self.nodes(), self.cpus, self.cuda)
        return min(slots, self.workers) if self.workers else slots

    def room(self) -> int:
        return max(0, self.capacity() - len(self.inflight))

    def running(self) -> int:
        return len(self.inflight)

    def await_room(self, timeout: float = 300.0) -> None:
        """Every node that could take a task is gone (nothing runs, nothing fits): wait up to ``timeout`` seconds for
        one to join, then give up in one line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.room() > 0:
                return
            time.sleep(2.0)
            self.nodes(fresh=True)
        raise DsgenError(f"no live Ray node can take a task of {self.cpus} CPUs{' and 1 GPU' if self.cuda else ''} "
                         f"after {timeout:.0f} s (nodes lost?); what was made is on disk: run the command again "
                         "when the cluster is back")

    def _ship(self, relative: Path) -> Any:
        """What the task reads at ``relative`` under the output folder, put once in Ray's object store."""
        key = relative.as_posix()
        if key not in self._shipped or key.startswith("cache/labels"):  # an API judge's cache grows as runs end
            self._shipped[key] = self.ray.put(read_tree(Path(self.runner.out), relative))
        return self._shipped[key]

    def submit(self, task: Task) -> None:
        largest = max((n.get("memory", 0) for n in self.nodes()), default=0) or None
        remote = self.ray.remote(execute_on_worker).options(
            num_cpus=self.cpus, num_gpus=1 if self.cuda else 0, memory=declared_memory(task.kind, self.peaks, largest),
            max_retries=self.max_retries, retry_exceptions=False, name=f"dsgen {task.label()}")
        ref = remote.remote(task, self.settings, *[self._ship(r) for r in task.reads()])
        self.inflight[ref] = (task, time.perf_counter())

    def wait(self) -> list[tuple[Task, Outcome]]:
        ray = self.ray
        ready, _ = ray.wait(list(self.inflight), num_returns=1)
        more, _ = ray.wait([r for r in self.inflight if r not in ready], num_returns=len(self.inflight) - 1, timeout=0) \
            if len(self.inflight) > 1 else ([], [])
        finished = []
        for ref in [*ready, *more]:
            task, started = self.inflight.pop(ref)
            try:
                outcome = ray.get(ref)
            except ray.exceptions.RayError as exc:  # lost more often than it may start again
                outcome = self._lost(task, exc)
            if isinstance(task, RunTask):  # a run's files replace its files here as one set, its model folder whole
                self.runner.store.write_run_files(task.plan, outcome.files)
            else:
                write_tree(Path(self.runner.out), outcome.files)
            outcome.files = {}
            if isinstance(task, DatasetTask) and outcome.status == DONE:  # the chunks a local run left are assembled
                shutil.rmtree(Path(self.runner.out) / task.partial(), ignore_errors=True)
            wall = time.perf_counter() - started
            if outcome.peak_rss:
                self.peaks[task.kind] = max(self.peaks.get(task.kind, 0), outcome.peak_rss)
            self.records.append({"kind": task.kind, "task": task.label(), "status": outcome.status,
                                 "wall_seconds": round(wall, 3), "task_seconds": outcome.seconds,
                                 "overhead_seconds": round(wall - outcome.seconds, 3), "where": outcome.where,
                                 "peak_rss": outcome.peak_rss})
            finished.append((task, outcome))
        return finished

    def _lost(self, task: Task, exc: Exception) -> Outcome:
        """A task whose worker or node was lost more than ``max_retries`` times: a crashed run (its log says so), or a
        dataset or fit every run that needs it fails with."""
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if isinstance(exc, self.ray.exceptions.RayTaskError):  # the task's own code raised outside its guard
            error = RuntimeError(f"{task.label()} raised on its Ray worker: {first}")
        else:
            error = RuntimeError(f"{task.label()} lost its Ray worker more than {self.max_retries} times: {first}")
        if isinstance(task, RunTask):
            return Outcome(FAILED, error=self.runner.crashed(task.plan, error), where="ray")
        return Outcome(CRASHED, error=error, where="ray")

    def stop(self) -> None:
        for ref in list(self.inflight):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - a task that already ended
                pass
        self.inflight.clear()
        if self._connected_here:
            self.ray.shutdown()
            self._connected_here = self._started_here = False

    def summary(self) -> dict[str, Any]:
        """What the tasks cost: per kind, how many, their own seconds, the seconds the scheduling added, peak memory."""
        out: dict[str, Any] = {}
        for r in self.records:
            k = out.setdefault(r["kind"], {"tasks": 0, "task_seconds": 0.0, "overhead_seconds": 0.0, "peak_rss": 0})
            k["tasks"] += 1
            k["task_seconds"] = round(k["task_seconds"] + r["task_seconds"], 3)
            k["overhead_seconds"] = round(k["overhead_seconds"] + r["overhead_seconds"], 3)
            k["peak_rss"] = max(k["peak_rss"], r["peak_rss"] or 0)
        return out

