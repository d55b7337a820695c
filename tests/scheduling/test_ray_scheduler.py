"""A comparison's graph on a Ray cluster of this machine (ray.cluster_utils.Cluster: a head without CPUs and two
1-CPU nodes): the same datasets, fits and scores as the local scheduler; a node removed while its task runs costs
that task only; a killed driver resumes from disk; failures are reported as locally and never retried; a node
reading other evaluation data is refused in one line; ``dsgen compare --backend ray --address`` works end to end.

The driver is this test process (the mock plug-ins registered here and, through Ray's worker set-up hook, in every
worker) or a ``dsgen`` command started from it."""

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import require

ray = require("ray", "ray")
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
METHODS = ["mock-dino", "mock-sdi", "mock-sdi-filter", "mock-human", "base"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, sts_data_dir):
    from ray.cluster_utils import Cluster

    from dsgen.scheduling.ray_scheduler import SCRATCH_ENV
    from tests.scheduling.plugins import register

    register()
    scratch = tmp_path_factory.mktemp("scratch")
    calls = tmp_path_factory.mktemp("calls") / "calls.txt"
    saved = {k: os.environ.get(k) for k in (SCRATCH_ENV, "DSGEN_TEST_CALLS", "PYTHONPATH", "DSGEN_DATA_DIR")}
    os.environ.update({SCRATCH_ENV: str(scratch), "DSGEN_TEST_CALLS": str(calls), "DSGEN_DATA_DIR": str(sts_data_dir),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), saved["PYTHONPATH"]]))})
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})  # as dsgen starts Ray
    for _ in range(2):
        c.add_node(num_cpus=1)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "tests.scheduling.plugins.register",
                          "env_vars": {"PYTHONPATH": str(REPO)}})
    yield c, scratch, calls
    ray.shutdown()
    c.shutdown()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def unit(tiny_encoder_dir, tiny_lm_dir, sts_data_dir, tmp_path_factory):
    from dsgen.presets import Preset

    inputs = tmp_path_factory.mktemp("inputs") / "x1.txt"
    rng = random.Random(0)
    words = "a man woman dog cat plays runs guitar piano eats food street car red blue sits".split()
    inputs.write_text("\n".join(" ".join(rng.choice(words) for _ in range(7)) + "." for _ in range(40)))
    preset = Preset(name="unit", seeds=[1, 2], data_seeds=[42], inputs=str(inputs), tasks=["sts16"], max_inputs=12,
                    generation={"generator": str(tiny_lm_dir), "device": "cpu", "batch_size": 32, "per_label": 2,
                                "sampling": {"max_new_tokens": 6}},
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu",
                              "learning_rate": 1e-4, "min_trained_steps": 1},
                    reweighting={"sdi": {"encoder": str(tiny_encoder_dir), "epochs": 1.0, "device": "cpu"}})
    return preset, str(sts_data_dir)


@pytest.fixture(scope="module")
def local_reference(unit, tmp_path_factory):
    """The comparison on the local scheduler, one thread per task as a 1-CPU Ray task computes."""
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from tests.scheduling.plugins import register

    register()
    preset, data = unit
    out = tmp_path_factory.mktemp("local")
    failures: list = []
    results = run_many(METHODS, preset, preset.runs(), Runner(out, data, progress=False, threads=1), failures=failures)
    assert not failures and sorted(results) == sorted(METHODS)
    return out


def same_outputs(a: Path, b: Path) -> None:
    """Datasets byte for byte, fits' weights byte for byte, every result's scores and predictions, training pairs."""
    import numpy as np

    from dsgen.evaluation.results import Result

    datasets = sorted(p.relative_to(a) for p in (a / "cache" / "datasets").glob("*.jsonl"))
    assert datasets and datasets == sorted(p.relative_to(b) for p in (b / "cache" / "datasets").glob("*.jsonl"))
    for rel in datasets:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    fits = sorted(p.relative_to(a) for p in (a / "cache" / "fits").rglob("*.safetensors"))
    assert fits == sorted(p.relative_to(b) for p in (b / "cache" / "fits").rglob("*.safetensors"))
    for rel in fits:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    results = sorted(p.relative_to(a) for p in (a / "results").rglob("data-*-seed-*.json") if ".failed" not in p.name)
    assert results and results == sorted(p.relative_to(b) for p in (b / "results").rglob("data-*-seed-*.json")
                                          if ".failed" not in p.name)
    for rel in results:
        ra, rb = Result.load(a / rel), Result.load(b / rel)
        assert ra.tasks == rb.tasks and ra.extra["run_key"] == rb.extra["run_key"], rel
        pa, pb = Result.load_predictions(a / rel), Result.load_predictions(b / rel)
        assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa), rel
        train = (a / rel).with_suffix(".train.jsonl")
        if train.exists():
            assert train.read_bytes() == (b / rel).with_suffix(".train.jsonl").read_bytes(), rel


def remove_node_running(cluster, scratch: Path, kind: str, removed: list) -> threading.Thread:
    """In the background: remove the node on which the first task of ``kind`` starts, while it runs."""
    c, _, _ = cluster

    def watch():
        deadline = time.time() + 300
        while time.time() < deadline and not removed:
            for folder in scratch.glob(f"dsgen-{kind}-*"):
                node8 = folder.name.split("-")[2]
                for node in c.list_all_nodes():
                    if node.node_id.startswith(node8) and node is not c.head_node:
                        removed.append((node8, folder.name))
                        c.remove_node(node, allow_graceful=False)
                        return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_ray_gives_the_local_outputs_and_a_node_lost_mid_run_costs_that_task(cluster, unit, local_reference, tmp_path):
    """Issue 33: the same datasets, fits and scores as the local scheduler on 2 workers, whatever the order tasks
    finish in; a node removed while one of its runs trains costs that run, which Ray starts again on the other
    node; every artefact made once (one SDI fit for rise and rise-filter over 2 training seeds)."""
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.scheduling.ray_scheduler import RayScheduler

    c, scratch, _ = cluster
    preset, data = unit
    removed: list = []
    watcher = remove_node_running(cluster, scratch, "run", removed)
    scheduler = RayScheduler(cpus_per_worker=1)
    failures: list = []
    results = run_many(METHODS, preset, preset.runs(), Runner(tmp_path, data, progress=False, threads=1),
                       failures=failures, scheduler=scheduler)
    watcher.join(timeout=60)
    c.add_node(num_cpus=1)  # the next tests have two workers again
    c.wait_for_nodes()
    assert not failures and sorted(results) == sorted(METHODS)
    assert removed, "no run task was seen running"
    kinds = [r["kind"] for r in scheduler.records]
    assert kinds.count("fit") == 1 and kinds.count("dataset") == 2 and kinds.count("run") == 9
    assert all(r["status"] == "done" and r["peak_rss"] for r in scheduler.records)
    same_outputs(local_reference, tmp_path)
    assert not list(tmp_path.rglob("*.tmp"))  # nothing half-written
    assert (tmp_path / "logs" / "cache").is_dir()  # what tasks printed, under logs/


DRIVER = """
import sys
sys.path.insert(0, {repo!r})
import ray
from tests.scheduling.plugins import register
register()
from dsgen.presets import Preset
from dsgen.orchestration import run_many
from dsgen.runs.pipeline import Runner
from dsgen.scheduling.ray_scheduler import RayScheduler
ray.init(address={address!r}, log_to_driver=False, runtime_env={{"worker_process_setup_hook":
         "tests.scheduling.plugins.register", "env_vars": {{"PYTHONPATH": {repo!r}}}}})
preset = Preset.from_dict({preset!r})
run_many({methods!r}, preset, preset.runs(), Runner({out!r}, {data!r}, progress=False, threads=1), failures=[],
         scheduler=RayScheduler(cpus_per_worker=1, workers=1))
print("finished")
"""


def test_a_driver_killed_mid_comparison_resumes_from_disk(cluster, unit, local_reference, tmp_path):
    """The driver killed (SIGKILL) once a result is written leaves only whole artefacts; the next command reuses them
    and the outputs equal an uninterrupted run's."""
    import signal

    c, _, _ = cluster
    preset, data = unit
    script = DRIVER.format(repo=str(REPO), address=c.address, preset=preset.to_dict(), methods=METHODS,
                           out=str(tmp_path), data=data)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and not list((tmp_path / "results").rglob("data-*.json")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    made = {p.relative_to(tmp_path) for p in (tmp_path / "results").rglob("data-*.json")}
    assert made and len(made) < len(METHODS) * 2  # killed mid-comparison
    assert not list(tmp_path.rglob("*.tmp"))
    resumed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0 and "finished" in resumed.stdout, resumed.stderr[-2000:]
    same_outputs(local_reference, tmp_path)


def test_failures_on_ray_are_reported_as_locally_and_never_retried(cluster, unit, tmp_path):
    """A run that fails on its data (a filter keeps nothing) is a RunFailed, a bug inside a run (the trainer raises on
    training seed 2) a RunCrashed with its traceback and what it printed under logs/; both as the local scheduler
    reports them, the other runs go on, and neither is tried again."""
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.runs.records import RunCrashed
    from dsgen.scheduling.ray_scheduler import RayScheduler

    _, _, calls = cluster
    preset, data = unit
    methods = ["mock-crash", "mock-gense-strict", "base"]
    local: list = []
    run_many(methods, preset, preset.runs(), Runner(tmp_path / "local", data, progress=False, threads=1), failures=local)
    calls.write_text("")
    remote: list = []
    scheduler = RayScheduler(cpus_per_worker=1)
    results = run_many(methods, preset, preset.runs(), Runner(tmp_path / "ray", data, progress=False, threads=1),
                       failures=remote, scheduler=scheduler)
    assert len({r["where"].split(" node ")[1] for r in scheduler.records}) == 2  # two 1-CPU nodes, both used
    assert [r.seed for r in results["mock-crash"]] == [1] and len(results["base"]) == 2
    assert [(f.method, f.run, type(f).__name__) for f in remote] == [(f.method, f.run, type(f).__name__) for f in local]
    for ours, theirs in zip(remote, local):
        assert ours.reason.replace(str(tmp_path / "ray"), "OUT") == theirs.reason.replace(str(tmp_path / "local"), "OUT")
    crash = next(f for f in remote if isinstance(f, RunCrashed))
    assert crash.log.is_relative_to(tmp_path / "ray" / "logs") and "\n" not in crash.reason
    text = crash.log.read_text()
    assert "Traceback" in text and "TypeError: '<' not supported" in text
    assert sorted(calls.read_text().split()) == ["1", "2"]  # the crashing run was not tried again
    failed = (tmp_path / "ray" / "results").rglob("*.failed.json")
    assert sorted(json.loads(p.read_text())["method"] for p in failed) == ["mock-crash", "mock-gense-strict",
                                                                          "mock-gense-strict"]


def test_a_node_with_other_evaluation_data_is_refused_in_one_line(cluster, unit, tmp_path):
    from dsgen.errors import DsgenError
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.scheduling.ray_scheduler import RayScheduler

    c, _, _ = cluster
    preset, data = unit
    other = tmp_path / "sts"
    shutil.copytree(Path(data) / "sts16", other / "sts16")
    gold = next((other / "sts16").glob("STS2016.gs.headlines*"))
    gold.write_text(gold.read_text(encoding="utf-8").replace("5", "4", 1), encoding="utf-8")  # one gold score
    node = c.add_node(num_cpus=1, env_vars={"DSGEN_DATA_DIR": str(other)})
    c.wait_for_nodes()
    try:
        with pytest.raises(DsgenError, match="refused: its evaluation data differ from the driver's") as err:
            run_many(["base"], preset, preset.runs(), Runner(tmp_path / "out", data, progress=False),
                     scheduler=RayScheduler(cpus_per_worker=1))
        assert "\n" not in str(err.value) and str(other) in str(err.value)
        assert not (tmp_path / "out" / "results").exists()  # refused before any task
    finally:
        c.remove_node(node)


def test_a_node_with_other_package_versions_or_code_is_refused_in_one_line(cluster, unit, tmp_path):
    """Issue 39: nodes were checked for data and models only. A node whose torch, transformers, sentence-transformers
    or dsgen code differs from the driver's (simulated: the node's workers report other versions, ``plugins.py``) is
    refused in one line before any task."""
    from dsgen.errors import DsgenError
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.scheduling.ray_scheduler import RayScheduler
    from tests.scheduling.plugins import FAKE_VERSIONS

    c, _, _ = cluster
    preset, data = unit
    for fake, what in (({"torch": "0.0.1"}, "torch 0.0.1"), ({"dsgen_code": "0123456789abcdef"}, "dsgen code")):
        node = c.add_node(num_cpus=1, env_vars={FAKE_VERSIONS: json.dumps(fake)})
        c.wait_for_nodes()
        try:
            with pytest.raises(DsgenError, match="refused: its") as err:
                run_many(["base"], preset, preset.runs(), Runner(tmp_path / "out", data, progress=False),
                         scheduler=RayScheduler(cpus_per_worker=1))
            assert "\n" not in str(err.value) and what in str(err.value), str(err.value)
            assert not (tmp_path / "out" / "results").exists()  # refused before any task
        finally:
            c.remove_node(node)


def test_a_command_without_an_address_starts_a_ray_of_its_own_beside_a_running_cluster(cluster):
    """``ray.init()`` without an address joins the cluster a ``ray start`` or a ``Cluster`` of this machine last wrote to
    /tmp/ray/ray_current_cluster (this module's is written there); dsgen's default is a Ray of its own for the command
    (all of this machine's CPUs, one node), never another program's cluster."""
    c, _, _ = cluster
    code = ("import os, ray; from dsgen.generation.ray_backend import connect_ray; connect_ray(ray, None, {}); "
            "print(ray.get_runtime_context().gcs_address, len(ray.nodes()), ray.cluster_resources().get('CPU'))")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    gcs, nodes, cpus = out.stdout.split()
    assert gcs != c.address and nodes == "1" and float(cpus) == os.cpu_count()


def test_the_command_line_runs_a_comparison_on_a_cluster(cluster, unit, tmp_path, tiny_encoder_dir):
    """``dsgen compare --backend ray --address`` with a built-in method: the table, and the scores a local command
    writes."""
    c, _, _ = cluster
    preset, data = unit
    toml = tmp_path / "tiny.toml"
    toml.write_text(f'data_seeds = [42]\nseeds = [1]\ntasks = ["sts16"]\n[training]\nencoder = "{tiny_encoder_dir}"\n')
    common = [sys.executable, "-m", "dsgen.cli", "compare", "base", "--preset", str(toml), "--data-dir", data,
              "--cpus-per-worker", "1"]
    env = {**os.environ, "DSGEN_DATA_DIR": data}
    remote = subprocess.run([*common, "--backend", "ray", "--address", c.address, "--out", str(tmp_path / "ray")],
                            capture_output=True, text=True, timeout=600, env=env)
    assert remote.returncode == 0, remote.stderr[-2000:]
    assert "runs" in remote.stdout and "1/1" in remote.stdout  # the progress view over runs
    local = subprocess.run([*common, "--out", str(tmp_path / "local")], capture_output=True, text=True, timeout=600,
                           env=env)
    assert local.returncode == 0, local.stderr[-2000:]
    ours, theirs = (sorted((tmp_path / o / "results").rglob("data-*.json")) for o in ("ray", "local"))
    assert len(ours) == 1 and json.loads(ours[0].read_text())["tasks"] == json.loads(theirs[0].read_text())["tasks"]
    assert (tmp_path / "ray" / "tables" / "tiny" / "compare-base.md").exists()
