"""The comparison graph on the local scheduler (each artefact made once, plan after plan, on a fixed thread count) and
the Ray scheduler's pieces that need no Ray: task slots per node, declared memory, how the driver writes what a
worker returns, the progress view over runs."""

from pathlib import Path

import pytest

from dsgen.presets import Preset
from dsgen.orchestration import run_many
from dsgen.runs.pipeline import Runner
from tests.mock_components import word_sentences_file
from tests.scheduling.plugins import register


@pytest.fixture(scope="module")
def unit(tiny_encoder_dir, tiny_lm_dir, sts_data_dir, tmp_path_factory):
    register()
    inputs = word_sentences_file(tmp_path_factory.mktemp("inputs"))
    preset = Preset(name="unit", seeds=[1, 2], data_seeds=[42], inputs=str(inputs), tasks=["sts16"], max_inputs=12,
                    generation={"generator": str(tiny_lm_dir), "device": "cpu"},
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu",
                              "learning_rate": 1e-4, "min_trained_steps": 1},
                    reweighting={"sdi": {"encoder": str(tiny_encoder_dir), "epochs": 1.0, "device": "cpu"}})
    return preset, str(sts_data_dir)


class Recorder:
    """A local scheduler that records the tasks it runs, in order."""

    def __init__(self):
        from dsgen.scheduling.local import LocalScheduler

        self.inner, self.tasks = LocalScheduler(), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def submit(self, task):
        self.tasks.append((task.kind, task.label()))
        self.inner.submit(task)


def test_the_local_graph_makes_each_artefact_once_plan_after_plan_on_its_thread_count(unit, tmp_path):
    """Issue 33: a comparison is a graph of artefacts; on the local scheduler each is made once, by one task, when
    the first plan needs it, plan after plan (what compare always did); the human dataset, whose size waits for
    DINO's dataset, joins the graph when that exists; every task computes on the runner's threads."""
    preset, data = unit
    scheduler = Recorder()
    results = run_many(["mock-dino", "mock-sdi", "mock-sdi-filter", "mock-human", "base"], preset, preset.runs(),
                       Runner(tmp_path, data, progress=False, threads=1), scheduler=scheduler)
    assert [k for k, _ in scheduler.tasks].count("dataset") == 2 and [k for k, _ in scheduler.tasks].count("fit") == 1
    assert scheduler.tasks[:3] == [("dataset", scheduler.tasks[0][1]), ("run", "mock-dino (data seed 42, training seed 1)"),
                                   ("run", "mock-dino (data seed 42, training seed 2)")]
    assert scheduler.tasks[3][0] == "fit" and scheduler.tasks[-1] == ("run", "base (data seed 42, training seed 1)")
    assert [k for k, _ in scheduler.tasks].count("run") == 9  # base: one model for both seeds, read back for the second
    assert all(r.extra.get("threads") in (1, None) for rs in results.values() for r in rs)
    assert {r.extra["threads"] for r in results["mock-dino"]} == {1}
    again = Recorder()  # everything on disk: a rerun makes nothing
    run_many(["mock-dino", "mock-sdi", "mock-human", "base"], preset, preset.runs(),
             Runner(tmp_path, data, progress=False, threads=1), scheduler=again)
    assert again.tasks == []


def test_task_slots_count_each_node_and_memory_is_declared_from_the_measured_peak():
    from dsgen.scheduling.ray_scheduler import GB, MEASURED_PEAK, MEMORY_MARGIN, declared_memory, task_slots

    nodes = [{"CPU": 4.0, "memory": 8 * GB}, {"CPU": 1.0, "memory": 2 * GB}, {"CPU": 2.0, "GPU": 1.0}]
    assert task_slots(nodes, 1, False) == 7 and task_slots(nodes, 2, False) == 3  # not 7 // 2: per node
    assert task_slots(nodes, 1, True) == 1 and task_slots(nodes, 4, False) == 1
    assert declared_memory("run", {}, None) == int(MEASURED_PEAK["run"] * MEMORY_MARGIN)
    assert declared_memory("run", {"run": 4 * GB}, None) == int(4 * GB * MEMORY_MARGIN)  # measured here: that peak
    assert declared_memory("run", {"run": 40 * GB}, 8 * GB) == 8 * GB  # never more than the largest node holds


def test_the_driver_writes_a_workers_files_atomically_markers_last(tmp_path, monkeypatch):
    import dsgen.artifacts
    from dsgen.errors import DsgenError
    from dsgen.scheduling.ray_scheduler import commit_last, read_tree, write_tree

    files = {"results/p/m/v/data-1-seed-1.json": b"{}", "results/p/m/v/data-1-seed-1.pred.npz": b"x",
             "results/p/m/v/data-1-seed-1.failed.json": b"{}", "cache/datasets/t-k.jsonl": b"row\n",
             "cache/datasets/t-k.jsonl.meta.json": b"{}", "cache/fits/sdi-k/model.bin": b"w", "cache/fits/sdi-k/fit.json": b"{}",
             "results/p/m/v/data-1-seed-1.model/config.json": b"{}"}  # a kept model's parts come before its result
    assert [f for f in files if commit_last(f)] == ["results/p/m/v/data-1-seed-1.json", "cache/datasets/t-k.jsonl.meta.json",
                                                     "cache/fits/sdi-k/fit.json"]
    written = []
    real = dsgen.artifacts.atomic_open
    monkeypatch.setattr(dsgen.artifacts, "atomic_open", lambda path, mode="w": written.append(Path(path).name) or real(path, mode))
    write_tree(tmp_path, files)
    assert set(written[-3:]) == {"data-1-seed-1.json", "t-k.jsonl.meta.json", "fit.json"} and "config.json" in written
    assert read_tree(tmp_path, Path("cache/datasets/t-k.jsonl")) == {"cache/datasets/t-k.jsonl": b"row\n",
                                                                     "cache/datasets/t-k.jsonl.meta.json": b"{}"}
    assert set(read_tree(tmp_path, Path("cache/fits/sdi-k"))) == {"cache/fits/sdi-k/model.bin", "cache/fits/sdi-k/fit.json"}
    assert read_tree(tmp_path, Path("cache/labels")) == {}
    with pytest.raises(DsgenError, match="outside the output folder"):
        write_tree(tmp_path, {"../escape.txt": b"x"})


def test_the_view_counts_runs_and_estimates_what_is_left():
    from dsgen.scheduling.view import RunsView

    view = RunsView(None, total=4, enabled=False)
    view.finished(ok=True, cached=True)  # read from the cache: done, not in the rate
    assert view.eta() == ""
    view.started()
    view.first_start -= 10  # the first run started 10 s ago
    view.stopped()
    view.finished(ok=True)
    view.finished(ok=False)
    assert (view.done, view.failed, view.cached, view.made, view.running) == (2, 1, 1, 2, 0)
    assert view.eta() in ("ETA 0:00:05", "ETA 0:00:04")  # one run left at 2 runs per 10 s
