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
    assert training_failure({**good, "best_validation_spearman": None}) is None  # undefined (constant input): no divergence


def test_a_cached_result_with_a_nan_is_never_reused_and_never_a_score(setup, tmp_path, monkeypatch):
    """A result written before this rule (a bare NaN in its training record or in a task's Spearman) is not read back
    as a score: the run is made again, and a table marks it failed."""
    from dsgen.evaluation.results import Result
    from dsgen.reports.tables import comparison_frame

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


# -- 2. a run's folder holds one set of files ---------------------------------------------------------------------

RUN_FILES = (".json", ".pred.npz", ".train.jsonl", ".validation.jsonl", ".model", ".failed.json")


def present(path: Path) -> set[str]:
    return {s for s in RUN_FILES if path.with_suffix(s).exists()}


def test_a_runs_folder_holds_its_current_result_or_its_failure_never_both(setup, tmp_path):
    """The issue's sequence on one result folder (the inputs file edited in place: the same folder, a new key):
    a run with a validation split; a re-run whose split is empty (the old split must go); a re-run that fails (the
    old result set must go, its kept model too); a later success (the failure record must go)."""
    preset, data = setup
    folder = tmp_path / "in"
    mine = replace(preset, inputs=str(inputs_file(folder, 40)),
                   training={**preset.training, "batch_size": 4, "min_trained_steps": 3})
    plan = plan_run("mock-dino", mine, 1)
    runner = Runner(tmp_path / "runs", data, progress=False, save_models=True)
    path = runner.result_path(plan)

    runner.run(plan)
    assert present(path) == {".json", ".pred.npz", ".train.jsonl", ".validation.jsonl", ".model"}
    first = json.loads(path.read_text())["extra"]["run_key"]

    inputs_file(folder, 2)  # 14 pairs: 4 steps, 3 at a non-zero rate (it trains), no validation pair
    again = Runner(tmp_path / "runs", data, progress=False, save_models=True)
    result = again.run(plan_run("mock-dino", mine, 1))
    assert result.extra["validation_pairs"] == 0 and result.extra["run_key"] != first
    assert present(path) == {".json", ".pred.npz", ".train.jsonl", ".model"}

    inputs_file(folder, 0, ["dog.", "cat."])  # one-word inputs keep 10 pairs: 3 steps, 2 at a non-zero rate
    with pytest.raises(RunFailed, match="trained too little"):
        Runner(tmp_path / "runs", data, progress=False, save_models=True).run(plan_run("mock-dino", mine, 1))
    assert present(path) == {".failed.json"}

    inputs_file(folder, 40)
    Runner(tmp_path / "runs", data, progress=False, save_models=True).run(plan_run("mock-dino", mine, 1))
    assert present(path) == {".json", ".pred.npz", ".train.jsonl", ".validation.jsonl", ".model"}
    assert json.loads(path.read_text())["extra"]["run_key"] == first


def test_a_crash_removes_the_stale_result_set_too(setup, tmp_path, monkeypatch):
    preset, data = setup
    mine = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)))
    plan = plan_run("mock-dino", mine, 1)
    runner = Runner(tmp_path / "runs", data, progress=False)
    runner.run(plan)
    path = runner.result_path(plan)
    assert ".json" in present(path)
    runner.crashed(plan, TypeError("a bug"))
    assert present(path) == {".failed.json"}


def test_the_drivers_files_of_a_run_replace_its_whole_set(setup, tmp_path):
    """A Ray driver writes the files a worker returned (:meth:`RunStore.write_run_files`): the run's stale files
    under ``--out`` go (a failure removes the old result set and kept model; a success without a validation split
    removes the old split and the failure record), and a kept model folder is replaced whole, never merged."""
    preset, data = setup
    mine = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)))
    plan = plan_run("mock-dino", mine, 1)
    runner = Runner(tmp_path / "runs", data, progress=False)
    path = runner.result_path(plan)
    rel = path.relative_to(runner.out).with_suffix("")
    path.parent.mkdir(parents=True)
    for suffix in (".json", ".pred.npz", ".train.jsonl", ".validation.jsonl"):
        path.with_suffix(suffix).write_text("old")
    (path.with_suffix(".model") / "old_module").mkdir(parents=True)
    (path.with_suffix(".model") / "old_module" / "model.safetensors").write_text("old")
    (path.with_suffix(".model") / "dsgen_export.json").write_text('{"kind": "model-folder"}')
    runner.store.write_run_files(plan, {f"{rel}.failed.json": b"{}", f"logs/{rel.name}.log": b"log"})
    assert present(path) == {".failed.json"}
    assert (runner.out / "logs" / f"{rel.name}.log").read_bytes() == b"log"
    path.with_suffix(".validation.jsonl").write_text("old")
    (path.with_suffix(".model") / "old_module").mkdir(parents=True)
    (path.with_suffix(".model") / "old_module" / "model.safetensors").write_text("old")
    (path.with_suffix(".model") / "dsgen_export.json").write_text('{"kind": "model-folder"}')
    new = {f"{rel}.json": b"{}", f"{rel}.train.jsonl": b"new", f"{rel}.model/model.safetensors": b"new",
           f"{rel}.model/modules.json": b"[]", f"{rel}.model/dsgen_export.json": b'{"kind": "model-folder"}'}
    runner.store.write_run_files(plan, new)
    assert present(path) == {".json", ".train.jsonl", ".model"}
    assert sorted(p.name for p in path.with_suffix(".model").iterdir()) == ["dsgen_export.json", "model.safetensors",
                                                                           "modules.json"]
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_a_kept_model_folder_without_its_weights_is_not_a_kept_model(setup, tmp_path):
    """``--save-model``: a run's result counts as cached only beside its kept model, and a ``<run>.model/`` without
    weights (a crash's leftovers, a folder someone emptied) is not one: the run is made again."""
    preset, data = setup
    mine = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)))
    plan = plan_run("mock-dino", mine, 1)
    runner = Runner(tmp_path / "runs", data, progress=False, save_models=True)
    result = runner.run(plan)
    key = result.extra["run_key"]
    model = runner.result_path(plan).with_suffix(".model")
    assert runner.cached_result(plan, key) is not None
    for weights in [*model.glob("*.safetensors"), *model.glob("pytorch_model.bin")]:
        weights.unlink()
    assert runner.cached_result(plan, key) is None


# -- 3. keys hold the resolved device ------------------------------------------------------------------------------

def test_run_keys_hold_the_resolved_device_not_auto(setup, tmp_path, monkeypatch):
    """A GPU-trained and a CPU-trained run of ``device = "auto"`` are two results; an explicit device keys as before
    (``auto`` resolved to it gives its key)."""
    import torch

    preset, data = setup
    mine = replace(preset, inputs=str(inputs_file(tmp_path / "in", 40)))
    auto = replace(mine, training={**mine.training, "device": "auto"})
    runner = Runner(tmp_path / "runs", data, progress=False, threads=1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    on_cpu = runner.run_key(plan_run("mock-dino", auto, 1))
    explicit_cpu = runner.run_key(plan_run("mock-dino", mine, 1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    on_gpu = runner.run_key(plan_run("mock-dino", auto, 1))
    assert on_cpu != on_gpu
    assert on_cpu == explicit_cpu
    assert runner.run_key(plan_run("mock-dino", mine, 1)) == explicit_cpu  # an explicit device is what it says
    runner.data.auto_device = "cpu"  # a scheduler whose tasks run on CPUs (Ray without GPUs) resolves auto so
    assert runner.run_key(plan_run("mock-dino", auto, 1)) == on_cpu


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


# -- 2. export dataset reads the current run only -------------------------------------------------------------------

def test_export_dataset_refuses_a_stale_or_failed_run_in_one_line(setup, tmp_path):
    """``export dataset`` exported whatever result lay at the run's path: one of an older key (the inputs edited since)
    or one beside a failure record. It exports the current plan's result only."""
    from dsgen.export.dataset_folder import from_plan, from_run

    preset, data = setup
    folder = tmp_path / "in"
    mine = replace(preset, inputs=str(inputs_file(folder, 40)))
    runs = tmp_path / "runs"
    runner = Runner(runs, data, progress=False)
    plan = plan_run("mock-dino", mine, 1)
    runner.run(plan)
    assert from_plan(plan, runs, data_dir=data).splits["train"]
    inputs_file(folder, 30)  # edited in place, not run again: the result on disk is another key's
    with pytest.raises(DsgenError, match="not the current run") as err:
        from_plan(plan_run("mock-dino", mine, 1), runs, data_dir=data)
    assert "\n" not in str(err.value)
    inputs_file(folder, 40)
    path = runner.result_path(plan)
    path.with_suffix(".failed.json").write_text('{"reason": "trained nothing"}')  # as dsgen left it before
    for export in (lambda: from_plan(plan_run("mock-dino", mine, 1), runs, data_dir=data),
                   lambda: from_run(path, runs / "cache" / "datasets")):
        with pytest.raises(DsgenError, match="failed") as err:
            export()
        assert "\n" not in str(err.value)
