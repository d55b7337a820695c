"""The GPU check (``benchmarks/gpu_check.py``, ``make gpu-check``) runs here at the tiny scale on the CPU, so that a
command written for GPUs, which no CI machine has, cannot rot: every section must run and be reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_check(*args: str, data_dir: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The check in a process of its own (as `make gpu-check` runs it), nothing carried: this environment has all."""
    return subprocess.run([sys.executable, "-m", "dsgen.benchmarks.gpu_check", "--carry", str(ROOT / "no-such-folder"),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, "DSGEN_DATA_DIR": str(data_dir)})


@pytest.fixture(scope="module")
def tiny_check(tmp_path_factory, sts_data_dir):
    out = tmp_path_factory.mktemp("gpu-check")
    proc = run_check("--device", "cpu", "--tiny", "--out", str(out), data_dir=sts_data_dir)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((out / "gpu-check.json").read_text(encoding="utf-8")), (out / "gpu-check.md").read_text(
        encoding="utf-8")


def test_every_section_runs_and_names_the_device(tiny_check):
    result, _ = tiny_check
    assert result["errors"] == {} and result["skipped"] == {}
    assert result["scale"] == "tiny" and result["preset"] == "paper" and result["within_budget"]
    assert result["device"]["type"] == "cpu" and result["device"]["name"].startswith("cpu")
    assert result["device"]["torch"] and "python" in result["device"]
    tests = result["tests"]
    assert "tests/test_gpu.py" in tests["files"] and tests["ok"]
    assert tests["failed"] == tests["error"] == 0 and tests["skipped"] + tests["passed"] >= 4  # skipped without CUDA


def test_throughputs_are_measured_at_the_preset_settings(tiny_check):
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    result, _ = tiny_check
    gen = plan_run("dino", load_preset("paper"), 1).generation
    g = result["generation"]
    assert g["sampling"] == gen.sampling.to_dict() and g["samples_per_item"] == gen.per_label
    assert g["preset_batch_size"] == gen.batch_size and str(gen.batch_size) in g["core"]
    for stats in (*g["core"].values(), g["reference"], *g["hf_generate"].values()):
        assert stats["decoded_outputs"] > 0 and stats["decoded_outputs_per_s"] > 0 and stats["seconds_per_output"] > 0
    for trainer in ("regression", "contrastive"):
        t = result["training"][trainer]
        assert t["examples_per_s"] > 0 and t["optimizer_steps"] >= 1 and t["tokens_per_sentence"] > 0
    e = result["evaluation"]
    assert e["later_run"]["sentences_per_s"] > 0 and e["first_run"]["sentences_per_s"] > 0
    assert e["selection"]["sentences_per_s"] > 0


def test_the_cost_model_has_a_row_for_every_method(tiny_check):
    from dsgen.method import METHODS

    result, markdown = tiny_check
    rows = {r["method"]: r for r in result["cost_model"]["rows"]}
    # every built-in method (the check runs in a process of its own: a method a test registers here is not there)
    assert {"dino", "rise", "gense", "base", "human"} <= set(rows) <= set(METHODS.names())
    dino = rows["dino"]
    assert dino["complete"] and all(dino["seconds"]["generation"][loop] > 0 for loop in ("core", "reference", "hf_generate"))
    assert dino["seconds"]["training_per_run"] > 0 and dino["seconds"]["evaluation_per_run"] > 0
    per_run = sum(dino["seconds"][k] for k in ("training_per_run", "selection_per_run", "evaluation_per_run"))
    assert dino["seconds"]["total"]["core"] == pytest.approx(
        dino["datasets"] * dino["seconds"]["generation"]["core"] + dino["runs"] * per_run, abs=0.5)
    for name in ("## Tests", "## Generation", "## Training", "## Evaluation", "## Cost model", "Tiny scale"):
        assert name in markdown
    assert all(f"`{m}`" in markdown for m in rows)


def test_paper_sizes_follow_the_plans(sts_data_dir):
    """The cost model's sizes under the paper preset: DINO's samples are its inputs x labels x samples per label,
    RISE adds its separately generated dev set, the human pairs are capped by STSb, API generation is not timed."""
    from dsgen.benchmarks import gpu_cost
    from dsgen.data.inputs import load_inputs
    from dsgen.data.sts import data_dir, read_stsb
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset
    from dsgen.taskspec import load_task_spec

    preset = load_preset("paper")
    rates = gpu_cost.Rates("openai-community/gpt2-xl", "float32", "sts-x2", 2.0, 40,
                           {"core": 0.01, "reference": 0.1, "hf_generate": 0.005}, "FacebookAI/roberta-base",
                           {"regression": 1e-3, "contrastive": 2e-3}, 1e-4, 2e-4)
    rows = {r["method"]: r for r in gpu_cost.cost_model(preset, rates, str(sts_data_dir), 1000)}
    plan = plan_run("dino", preset, preset.seeds[0])
    labels = len(load_task_spec("sts-x2").labels)
    inputs = len(load_inputs("stsb-train", None, str(sts_data_dir)))
    assert rows["dino"]["decoded_outputs_per_dataset"] == inputs * labels * plan.generation.per_label
    assert rows["dino"]["seconds"]["generation"]["core"] == pytest.approx(rows["dino"]["decoded_outputs_per_dataset"] * 0.01)
    assert [s["stage"] for s in rows["rise"]["generation_stages"]] == ["pairs", "dev"]
    assert rows["human"]["train_examples_per_run_at_most"] < len(read_stsb(data_dir(sts_data_dir), "train"))
    assert rows["dino-x1x2"]["generation_stages"][0]["stage"] == "x1"
    assert not rows["sim-gpt"]["complete"] and rows["sim-gpt"]["seconds"]["generation"]["core"] is None
    assert rows["base"]["seconds"]["total"]["core"] == pytest.approx(len(preset.seeds) * 1000 * 1e-4, abs=0.1)


def test_no_gpu_is_a_one_line_error(sts_data_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    proc = run_check("--device", "cuda", "--skip-tests", data_dir=sts_data_dir, timeout=120)
    assert proc.returncode == 2 and "no CUDA GPU is visible" in proc.stderr and "Traceback" not in proc.stderr
