"""Issue 39: what a run leaves in its folder and what may be read back from it.

- a run that diverged (non-finite weight update, loss or score) is a failed run, never a score, and no JSON dsgen
  writes holds a bare NaN;
- a run's folder holds its current key's result set or its failure, never both, never an older key's files;
- a kept model is accepted only with its weights;
- run keys hold the resolved device, not ``auto``;
- one command at a time writes under an output folder (a lock under ``--out``).
"""

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dsgen.errors import DsgenError
from dsgen.planning import plan_run
from dsgen.presets import Preset
from dsgen.runs.pipeline import Runner
from dsgen.runs.records import RunFailed
from tests.mock_components import register_mock_components, word_sentences_file

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tiny_encoder_dir, sts_data_dir, tmp_path_factory):
    register_mock_components()
    preset = Preset(name="unit", seeds=[1], data_seed=42, inputs="", tasks=["sts16"], max_inputs=40,
                    generation={"device": "cpu", "per_label": 2},
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu",
                              "learning_rate": 1e-4, "min_trained_steps": 1})
    return preset, str(sts_data_dir)


def inputs_file(folder: Path, n: int, lines: list[str] | None = None) -> Path:
    """``folder/x1.txt`` holding the first ``n`` of the mock methods' 40 sentences, or ``lines`` (rewritten in
    place)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = lines or word_sentences_file(folder).read_text().splitlines()[:n]
    path = folder / "x1.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def strict(path: Path):
    """``path``'s JSON, read as JSON is specified: a bare NaN or Infinity is an error."""
    def refuse(token):
        raise ValueError(f"{path} holds a bare {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


# -- 1. a diverged run ---------------------------------------------------------------------------------------------

def test_a_diverged_run_is_a_failed_run_with_no_bare_nan_anywhere(setup, tmp_path):
    """The issue's ``learning_rate = 1e38``: the weights blow up, the weight update is not finite. That is a failed
    run in one line (never a score, never cached), and its failure record is strict JSON."""
    preset, data = setup
    diverged = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)),
                       training={**preset.training, "learning_rate": 1e38})
    runner = Runner(tmp_path / "runs", data, progress=False)
    plan = plan_run("mock-dino", diverged, 1)
    with pytest.raises(RunFailed, match="diverged") as err:
        runner.run(plan)
    assert "\n" not in str(err.value)
    path = runner.result_path(plan)
    assert not path.exists() and not path.with_suffix(".pred.npz").exists()
    failed = strict(path.with_suffix(".failed.json"))
    assert "diverged" in failed["reason"]
    assert failed["extra"]["training"]["weight_update"] in ("NaN", "Infinity")  # named, not a bare NaN
    for written in (tmp_path / "runs").rglob("*.json"):
        strict(written)


def test_a_non_finite_weight_update_or_loss_fails_the_one_rule():
    from dsgen.training.fit import training_failure

    good = {"optimizer_steps": 20, "nonzero_lr_steps": 19, "weight_update": 0.01, "min_trained_steps": 10}
    assert training_failure(good) is None
    for value in (math.nan, math.inf, -math.inf):
        assert "diverged" in training_failure({**good, "weight_update": value})
    assert "diverged" in training_failure({**good, "nonfinite_loss_steps": 3})
    assert "diverged" in training_failure({**good, "best_validation_spearman": math.nan})


def test_a_cached_result_with_a_nan_is_never_reused_and_never_a_score(setup, tmp_path, monkeypatch):
    """A result written before this rule (a bare NaN in its training record or in a task's Spearman) is not read back
    as a score: the run is made again, and a table marks it failed."""
    from dsgen.evaluation.results import Result
    from dsgen.evaluation.tables import comparison_frame

    preset, data = setup
    mine = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)))
    runner = Runner(tmp_path / "runs", data, progress=False)
    plan = plan_run("mock-dino", mine, 1)
    runner.run(plan)
    path = runner.result_path(plan)
    key = json.loads(path.read_text())["extra"]["run_key"]
    original = path.read_text()
    for edit in ('"weight_update": NaN', "spearman"):
        text = original
        if edit == "spearman":
            doc = json.loads(text)
            doc["tasks"]["sts16"]["spearman"] = math.nan
            text = json.dumps(doc)  # Python writes a bare NaN, as dsgen did
        else:
            doc = json.loads(text)
            doc["extra"]["training"]["weight_update"] = math.nan
            text = json.dumps(doc)
        assert "NaN" in text
        path.write_text(text)
        assert runner.cached_result(plan, key) is None
        assert Result.load(path).training_failure() is not None
        frame = comparison_frame([Result.load(path)])
        assert list(frame.index) == ["mock-dino (failed)"]
    base = plan_run("base", mine, 1)
    monkeypatch.setattr("dsgen.evaluation.evaluator.StsEvaluator.evaluate", _nan_evaluation(
        __import__("dsgen.evaluation.evaluator", fromlist=["StsEvaluator"]).StsEvaluator.evaluate))
    with pytest.raises(RunFailed, match="not finite"):
        runner.run(base)
    assert not runner.result_path(base).exists()
    strict(runner.result_path(base).with_suffix(".failed.json"))


def _nan_evaluation(real):
    """An evaluation whose Spearman comes out NaN (a constant encoder's cosines)."""
    def evaluate(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        for score in result.tasks.values():
            score.spearman = math.nan
        return result

    return evaluate


def test_json_writers_refuse_a_bare_nan(tmp_path):
    from dsgen.artifacts import write_json, write_jsonl

    for write, value in ((write_json, {"x": math.nan}), (write_jsonl, [{"x": math.inf}])):
        with pytest.raises(ValueError):
            write(tmp_path / "x.json", value)
        assert not (tmp_path / "x.json").exists() and not list(tmp_path.iterdir())  # nothing half-written


# -- 7. one command at a time on an output folder -------------------------------------------------------------------

HOLD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from dsgen.runs.pipeline import Runner
    try:
        runner = Runner({out!r}, progress=False)  # held while it lives
    except Exception as exc:
        print(type(exc).__name__ + ": " + str(exc), flush=True)
        sys.exit(2)
    print("holding", flush=True)
    time.sleep(float(sys.argv[1]))
""")


def _hold(out: Path, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", HOLD.format(repo=str(REPO), out=str(out)), str(seconds)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_command_on_one_output_folder_fails_at_once_saying_who_holds_it(tmp_path):
    out = tmp_path / "runs"
    holder = _hold(out, 60)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        with pytest.raises(DsgenError) as err:
            Runner(out, progress=False)
        assert time.monotonic() - started < 5
        message = str(err.value)
        assert "\n" not in message and str(holder.pid) in message and "since" in message
        assert str(out) in message
        lock = json.loads((out / ".dsgen.lock").read_text())
        assert lock["pid"] == holder.pid and lock["host"] and lock["command"] and lock["since"]
    finally:
        holder.kill()
        holder.wait()
    Runner(out, progress=False)  # the holder is gone: its lock does not block


def test_runners_of_one_process_share_the_folder_and_others_wait_for_it(tmp_path):
    """Sequential (and nested) runners of one process on one folder are one command; the lock goes with the last of
    them (a runner can also be closed), and a command started after that runs."""
    out = tmp_path / "runs"
    first = Runner(out, progress=False)
    second = Runner(out, progress=False)
    other = _hold(out, 0)
    assert other.wait(timeout=60) == 2 and "DsgenError" in other.stdout.read()
    first.close()
    second.close()
    again = _hold(out, 0)
    assert again.wait(timeout=60) == 0, again.stdout.read() + again.stderr.read()
    with Runner(out, progress=False):
        pass
