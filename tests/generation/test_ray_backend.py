"""Generation on a local Ray with 2 CPUs and the tiny test model: the same file as one process, a
killed actor retried, a killed driver resumed; without Ray, a one-line error."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from dsgen.generation.sampling import SamplingConfig
from tests.cli_process import run_dsgen
from tests.conftest import require

ray = require("ray", "ray")  # the Ray backend is an optional extra

INPUTS = [f"Sentence number {i} is {'quite ' * (i % 3)}short." for i in range(10)]


def config(model_dir):
    return GenerationConfig(generator=str(model_dir), sampling=SamplingConfig(max_new_tokens=12), chunk_inputs=2,
                            batch_size=16, per_label=2, device="cpu", seed=9)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_actors_are_sized_from_each_nodes_cpus_not_the_clusters_sum():
    """4 nodes x 8 CPUs with 2 workers asked 16 CPUs per actor (the cluster's 32 / 2), which no node has."""
    from dsgen.generation.ray_backend import actor_cpus

    assert actor_cpus([8, 8, 8, 8], 2) == 8
    assert actor_cpus([8, 8, 8, 8], 8) == 4 and actor_cpus([8, 8, 8, 8], 32) == 1
    assert actor_cpus([2], 2) == 1 and actor_cpus([2], 1) == 2
    assert actor_cpus([16, 4], 3) == 5  # 16 // 5 = 3 actors on the big node
    assert actor_cpus([1], 5) == 1  # never below 1 (Ray queues what does not fit; the placement timeout says so)


@pytest.mark.slow
def test_the_failure_line_says_what_ray_did(local_ray):
    """An error of the decoding is not retried by Ray; only a lost worker is restarted."""
    from dsgen.generation.ray_backend import ray_failure

    @ray.remote
    def broken():
        raise ValueError("bad chunk")

    with pytest.raises(ray.exceptions.RayTaskError) as err:
        ray.get(broken.remote())
    line = ray_failure(ray, err.value, 3, max_restarts=2)
    assert line.startswith("chunk 3 failed in its Ray worker (an error of the decoding, not retried)")
    assert "ValueError: bad chunk" in line and "retries" not in line and "\n" not in line
    lost = ray_failure(ray, ray.exceptions.RayActorError(), 4, max_restarts=2)
    assert "lost its Ray worker" in lost and "restart only 2 times" in lost


@pytest.mark.slow
def test_workers_that_cannot_be_placed_are_a_one_line_error_not_a_hang(local_ray, tiny_lm_dir, tmp_path):
    from dsgen.errors import DsgenError
    from dsgen.generation.ray_backend import RayBackend

    backend = RayBackend(workers=2, device="cpu", cpus_per_worker=3, placement_timeout=3)  # 6 CPUs on a 2-CPU Ray
    with pytest.raises(DsgenError, match=r"Ray could not place 2 workers of \{'CPU': 3.0\} within 3 s \(nodes: 2 CPU\)"):
        DebiasedGenerator(config(tiny_lm_dir), backend=backend).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.slow
def test_ray_output_equals_one_process_and_a_killed_actor_is_retried(local_ray, tiny_lm_dir, tmp_path):
    from dsgen.generation.ray_backend import RayBackend

    cfg = config(tiny_lm_dir)
    DebiasedGenerator(cfg).generate(INPUTS, tmp_path / "local.jsonl", progress=False)
    backend = RayBackend(workers=2, device="cpu")
    real_run = backend.run
    killed = []

    def run_and_kill(spec, chunks, on_done, advance):
        def on_first(chunk, rows, timing):
            on_done(chunk, rows, timing)
            if not killed:  # kill that worker a moment later, while it decodes its next chunk
                pid = int(timing["worker"].rsplit(":", 1)[1])
                killed.append(pid)
                threading.Timer(0.05, os.kill, (pid, signal.SIGKILL)).start()
        return real_run(spec, chunks, on_first, advance)

    backend.run = run_and_kill
    DebiasedGenerator(cfg, backend=backend).generate(INPUTS, tmp_path / "ray.jsonl", progress=False)
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    meta = json.loads((tmp_path / "ray.jsonl.meta.json").read_text())
    assert meta["backend"]["backend"] == "ray" and meta["backend"]["workers"] == 2
    assert sum(w["chunks"] for w in meta["backend"]["per_worker"].values()) == 5
    assert killed and len(meta["backend"]["per_worker"]) >= 3  # the restarted actor is a new process


@pytest.mark.slow
def test_a_killed_driver_resumes_to_the_same_file(tiny_lm_dir, tmp_path):
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(INPUTS) + "\n")
    common = ["--inputs", str(inputs), "--generator", str(tiny_lm_dir), "--chunk-inputs", "2", "--batch-size", "16",
              "--per-label", "2", "--max-new-tokens", "12", "--device", "cpu", "--seed", "9", "--quiet"]
    cmd = [sys.executable, "-m", "dsgen.cli", "generate", *common]
    ref = tmp_path / "ref.jsonl"  # the reference in one process: a fork of the tests' command server will do
    assert run_dsgen(["generate", *common, "--out", ref], timeout=600).returncode == 0
    out = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"
    proc = subprocess.Popen([*cmd, "--out", str(out), "--backend", "ray", "--workers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while proc.poll() is None and not list(partial.glob("chunk-*.jsonl")) and time.time() < deadline:
        time.sleep(0.05)
    early = proc.poll()  # a driver that ended by itself before any chunk was stored says why
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert early is None, err.decode()[-2000:]
    assert not out.exists() and list(partial.glob("chunk-*.jsonl"))
    resumed = subprocess.run([*cmd, "--out", str(out), "--backend", "ray", "--workers", "2"], capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == ref.read_bytes()
    assert json.loads((tmp_path / "out.jsonl.meta.json").read_text())["stats"]["resumed_chunks"] >= 1


def test_without_ray_the_backend_is_a_one_line_error(tmp_path):
    code = ("import sys; sys.modules['ray'] = None; from dsgen.cli import main; "
            f"sys.argv = ['dsgen', 'generate', '--inputs', 'x.txt', '--backend', 'ray', '--out', '{tmp_path}/o.jsonl']; main()")
    (tmp_path / "x.txt").write_text("A sentence.\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "pip install 'dsgen[ray]'" in out.stderr and not (tmp_path / "o.jsonl.partial").exists()
