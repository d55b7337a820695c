"""The pipeline end to end on a mock generator, the real debiased generator on a tiny model, a tiny
encoder and one real STS task: caching and its keys, seed handling, reweighting, failures."""

import json
import os
from dataclasses import replace

import pytest
from pathlib import Path

from dsgen.data.pairs import read_pairs
from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from dsgen.method import METHODS
from dsgen.methods.dino import dino_recipe
from dsgen.planning import Overrides, plan_run
from dsgen.presets import Preset
from dsgen.orchestration import run_many
from dsgen.runs.pipeline import Runner
from dsgen.runs.records import RunFailed
from tests.mock_components import MockGenerator, RenamedDebiased, register_mock_components, word_sentences_file


@pytest.fixture(scope="module")
def setup(tiny_encoder_dir, tiny_lm_dir, sts_data_dir, tmp_path_factory):
    register_mock_components()
    inputs = word_sentences_file(tmp_path_factory.mktemp("inputs"))
    preset = Preset(name="unit", seeds=[1, 2], data_seed=42, inputs=str(inputs), tasks=["sts16"], max_inputs=40,
                    generation={"generator": str(tiny_lm_dir), "device": "cpu", "batch_size": 32, "per_label": 2,
                                "sampling": {"max_new_tokens": 6}},
                    # the tests of caching and keys train a few steps: the floor of a trained run is tested on its own
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu", "learning_rate": 1e-4,
                              "min_trained_steps": 1, "contrastive": {"batch_size": 16}},
                    reweighting={"sdi": {"encoder": str(tiny_encoder_dir), "epochs": 1.0, "device": "cpu"}})
    return preset, sts_data_dir


def test_run_caches_datasets_and_results_across_methods_and_seeds(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    MockGenerator.calls = 0
    results = run_many(["mock-dino", "mock-random", "base"], preset, [1, 2], runner)
    assert MockGenerator.calls == 1  # one dataset for two methods and two seeds
    d1, d2 = results["mock-dino"]
    assert d1.tasks["sts16"].n_pairs == 1186 and d1.seed == 1 and d2.seed == 2
    assert d1.tasks["sts16"].spearman != d2.tasks["sts16"].spearman  # seeds change training
    assert results["base"][0].tasks == results["base"][1].tasks
    for stage in ("generate_seconds", "postprocess_seconds", "train_seconds", "evaluate_seconds"):
        assert stage in d1.timings
    assert d1.extra["data_quality"]["pairs"] > 0 and "spearman" in d1.extra["data_quality"]
    path = runner.result_path(plan_run("mock-random", preset, 1))
    assert path.exists() and path.with_suffix(".pred.npz").exists()
    weights = [p.weight for p in read_pairs(path.with_suffix(".train.jsonl"))]
    assert all(0 <= w <= 1 for w in weights) and len(set(weights)) > 10
    before = path.stat().st_mtime_ns
    again = run_many(["mock-random"], preset, [1], runner)["mock-random"][0]
    assert path.stat().st_mtime_ns == before and again.predictions is not None  # reused, not recomputed
    assert MockGenerator.calls == 1
    fresh = Runner(tmp_path / "runs", str(data), progress=False, fresh=True)
    redo = run_many(["mock-random"], preset, [1], fresh)["mock-random"][0]
    assert MockGenerator.calls == 2 and redo.tasks == again.tasks  # recomputed, same numbers
    recomputed = path.stat().st_mtime_ns
    assert recomputed != before
    once_more = run_many(["mock-random"], preset, [1], fresh)["mock-random"][0]  # within the same fresh runner
    assert path.stat().st_mtime_ns == recomputed and MockGenerator.calls == 2 and once_more.tasks == redo.tasks


def test_variants_of_a_method_get_their_own_result_folders(setup, tmp_path, tiny_encoder_dir):
    """A real variant (another learning rate, another encoder) gets its own folder; an equivalent
    spelling of the same setting (1 and 1.0 for a float) and other seeds share one."""
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    a = runner.result_path(plan_run("mock-dino", preset, 1))
    b = runner.result_path(plan_run("mock-dino", preset, 1, Overrides(encoder=str(tiny_encoder_dir) + "/x")))
    c = runner.result_path(plan_run("mock-dino", preset, 2))
    assert a != b and a.parent == c.parent and a.name == "data-42-seed-1.json" and c.name == "data-42-seed-2.json"
    other_data = runner.result_path(plan_run("mock-dino", preset, 1, data_seed=7))
    assert other_data.parent == a.parent and other_data.name == "data-7-seed-1.json"
    lr = replace(preset, training={**preset.training, "learning_rate": 3e-4})
    assert runner.result_path(plan_run("mock-dino", lr, 1)).parent != a.parent
    one = replace(preset, training={**preset.training, "epochs": 1})
    one_point_zero = replace(preset, training={**preset.training, "epochs": 1.0})
    assert runner.result_path(plan_run("mock-dino", one, 1)) == runner.result_path(plan_run("mock-dino", one_point_zero, 1))
    assert runner.result_path(plan_run("mock-dino", one, 1)).parent == a.parent  # 1 epoch is the default


def test_the_real_generator_through_the_runner_decodes_once(setup, tmp_path, monkeypatch):
    """counter_labels=False used to miss its cache: the runner and the generator disagreed on the key."""
    import dsgen.generation.backends as backends

    preset, data = setup
    calls = []
    real = backends.decode_chunk
    monkeypatch.setattr(backends, "decode_chunk", lambda *a, **k: calls.append(1) or real(*a, **k))
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    plan = plan_run("tiny-dino-nocl", replace(preset, max_inputs=6), 1)
    first = runner.data.training_data(plan)
    n = len(calls)
    assert n >= 1 and first.extra["generated_pairs"] > 0
    second = Runner(tmp_path / "runs", str(data), progress=False).data.training_data(plan)
    assert len(calls) == n and second.extra["dataset_key"] == first.extra["dataset_key"]


def test_dataset_key_covers_generator_name_number_types_and_model_file(setup, tmp_path, tiny_lm_dir):
    preset, _ = setup
    inputs = ["One sentence.", "Two sentences."]
    base = GenerationConfig(generator=str(tiny_lm_dir))
    same = GenerationConfig.from_dict({"generator": str(tiny_lm_dir), "sampling": {"decay_constant": 100}})
    assert DebiasedGenerator(base).dataset_key(inputs) == DebiasedGenerator(same).dataset_key(inputs)  # 100 == 100.0
    assert RenamedDebiased(base).dataset_key(inputs) != DebiasedGenerator(base).dataset_key(inputs)
    key = DebiasedGenerator(base).dataset_key(inputs)
    weights = next(tiny_lm_dir.glob("*.safetensors"))
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:  # a local model is keyed by content (tests/test_identity.py edits one in place): a new mtime alone is not
        assert DebiasedGenerator(base).dataset_key(inputs) == key  # the same bytes, a newer mtime: the same model
    finally:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_run_key_covers_the_evaluation_data(setup, tmp_path):
    """The evaluation data enter the run key by content: a folder whose files change in place (same
    path) gives a new key, a copy of the same files under another path the same key."""
    preset, data = setup
    raw = plan_run("base", preset, 1)
    senteval = plan_run("base", preset, 1, Overrides(preprocess="senteval"))
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    assert runner.run_key(raw) != runner.run_key(senteval)
    copy = tmp_path / "data"
    (copy / "sts16").mkdir(parents=True)
    for f in (data / "sts16").iterdir():
        (copy / "sts16" / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    before = Runner(tmp_path / "runs", str(copy), progress=False).run_key(raw)
    assert before == runner.run_key(raw)  # the same pairs under another path
    gold = next((copy / "sts16").glob("STS2016.gs.headlines*"))
    gold.write_text(gold.read_text(encoding="utf-8").replace("5", "4", 1), encoding="utf-8")  # one gold score, in place
    assert Runner(tmp_path / "runs", str(copy), progress=False).run_key(raw) != before


def test_human_reference_row_trains_on_as_many_human_pairs(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    ref = runner.data.training_data(plan_run("mock-dino", preset, 1))
    human = runner.data.training_data(plan_run("mock-human", preset, 1))
    assert human.extra["size_of"] == {"method": "mock-dino", "pairs": len(ref.train) + len(ref.validation)}
    assert len(human.train) + len(human.validation) == len(ref.train) + len(ref.validation)
    assert all(0 <= p.label <= 1 for p in human.train) and len({p.label for p in human.train}) > 10
    plan = plan_run("mock-human", preset, 1)
    assert plan.models() == [plan.encoder]  # no generator: the key covers the encoder only
    assert runner.run_key(plan) != runner.run_key(plan_run("mock-dino", preset, 1))


def test_gense_pipeline_and_a_filter_that_keeps_nothing(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    failures: list[RunFailed] = []
    results = run_many(["mock-gense", "mock-gense-strict"], preset, [1], runner, failures=failures)
    ok = results["mock-gense"][0]
    assert ok.extra["reweighting"]["kept_fraction"] == 1.0 and ok.extra["training"]["triplets"] == 40
    assert ok.extra["training"]["text_template"]  # GenSE's prompt, on by default
    assert "mock-gense-strict" not in results and len(failures) == 1
    failure = failures[0]
    assert "no complete" in failure.reason and "warning" in failure.extra["reweighting"]
    assert runner.result_path(plan_run("mock-gense-strict", preset, 1)).with_suffix(".failed.json").exists()
    with pytest.raises(RunFailed):
        run_many(["mock-gense-strict"], preset, [1], runner)


def test_a_reweighter_error_is_that_runs_failure_not_the_comparisons(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    failures: list[RunFailed] = []
    results = run_many(["x1-sdi", "base"], preset, [1], runner, failures=failures)
    assert "base" in results and "x1-sdi" not in results
    assert len(failures) == 1 and "human-written inputs" in failures[0].reason
    failed = json.loads(runner.result_path(plan_run("x1-sdi", preset, 1)).with_suffix(".failed.json").read_text())
    assert failed["method"] == "x1-sdi" and "human-written" in failed["reason"]


@pytest.mark.parametrize("native", [True, False])
def test_a_bfloat16_evaluation_falls_back_to_float32_where_bfloat16_is_emulated(setup, monkeypatch, native):
    """An AVX2-only CPU emulates bfloat16 about 100x slower than float32: the plan says float32 and why."""
    import dsgen.models

    preset, _ = setup
    monkeypatch.setattr(dsgen.models, "native_bfloat16", lambda device="auto": native)
    plan = plan_run("mock-dino", replace(preset, eval_dtype="bfloat16"), 1)
    assert plan.evaluation["dtype"] == ("bfloat16" if native else "float32")
    assert ("no native bfloat16" in plan.origins["evaluation"]["dtype"]) != native


@pytest.mark.parametrize("capability,bf16,amx,cap,native", [
    ("AVX512", True, False, "", True),  # AMD EPYC (Zen 4), Intel Cooper Lake: AVX-512 BF16
    ("AVX512", False, True, None, True),  # a Xeon with AMX
    ("AVX512", False, False, "", False),  # an Intel Xeon without bfloat16 (Skylake, Cascade Lake, Ice Lake)
    ("AVX512", True, False, "AVX512_CORE_VNNI", False),  # oneDNN capped below its bfloat16 instructions
    ("AVX512", True, False, "avx512_core_bf16", True),
    ("AVX2", True, False, "", False),  # PyTorch capped at AVX2
])
def test_native_bfloat16_needs_the_instructions_not_only_avx512(monkeypatch, capability, bf16, amx, cap, native):
    import torch

    from dsgen.models import native_bfloat16

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert native_bfloat16("cpu") is native


def test_human_pairs_beyond_the_source_are_capped_and_say_so(setup, tmp_path):
    """A learning curve's human point at 1,000 inputs asks for ~7,400 pairs; STSb train has 5,749: the
    whole set, labelled as capped (this used to stop a comparison after its generation and training)."""
    from dsgen.artifacts import read_json, sidecar_path
    from dsgen.generation.human import HumanPairsConfig, HumanPairsGenerator

    _, data = setup
    gen = HumanPairsGenerator(HumanPairsConfig(n_pairs=7375), str(data))
    pairs = gen.generate(None, tmp_path / "human.jsonl", progress=False)
    meta = read_json(sidecar_path(tmp_path / "human.jsonl"))
    assert len(pairs) == 5749 and meta["capped"] and meta["asked"] == 7375 and meta["n_pairs"] == 5749


def test_seed_independent_methods_share_a_key_and_seeded_ones_do_not(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    assert runner.run_key(plan_run("base", preset, 1)) == runner.run_key(plan_run("base", preset, 2))
    assert runner.run_key(plan_run("mock-dino", preset, 1)) != runner.run_key(plan_run("mock-dino", preset, 2))


def test_a_trained_run_on_another_thread_count_is_another_result(setup, tmp_path):
    """Training's bits depend on torch's thread count, so a result made on 1 thread is never reused on 2; an
    untrained run's are the same on any count."""
    preset, data = setup
    one, two = (Runner(tmp_path / "runs", str(data), progress=False, threads=n) for n in (1, 2))
    assert one.run_key(plan_run("mock-dino", preset, 1)) != two.run_key(plan_run("mock-dino", preset, 1))
    assert one.run_key(plan_run("base", preset, 1)) == two.run_key(plan_run("base", preset, 1))


def _counting_training(monkeypatch):
    """Counts the trainer's runs (a rerun that trains nothing leaves it at 0)."""
    from dsgen.training.regression import RegressionTrainer

    calls = []
    real = RegressionTrainer.train
    monkeypatch.setattr(RegressionTrainer, "train", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def test_an_edited_inputs_file_is_a_new_run_and_an_untouched_rerun_does_nothing(setup, tmp_path, monkeypatch):
    """The stale result of the issue, reproduced: every line of the inputs file replaced at the same path
    must give a new dataset and a new result, not the old one under the new inputs."""
    preset, data = setup
    inputs = tmp_path / "mine.txt"
    inputs.write_text(Path(preset.inputs).read_text())
    mine = replace(preset, inputs=str(inputs), max_inputs=12)
    trained = _counting_training(monkeypatch)
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    MockGenerator.calls = 0
    first = runner.run(plan_run("mock-dino", mine, 1))
    assert MockGenerator.calls == 1 and len(trained) == 1
    again = Runner(tmp_path / "runs", str(data), progress=False).run(plan_run("mock-dino", mine, 1))
    assert MockGenerator.calls == 1 and len(trained) == 1 and again.tasks == first.tasks  # decodes and trains nothing
    inputs.write_text("\n".join(f"A completely different sentence number {i} about red cars." for i in range(40)))
    edited = Runner(tmp_path / "runs", str(data), progress=False).run(plan_run("mock-dino", mine, 1))
    assert MockGenerator.calls == 2 and len(trained) == 2
    assert edited.extra["dataset_key"] != first.extra["dataset_key"] and edited.extra["run_key"] != first.extra["run_key"]


def test_an_edited_task_spec_is_a_new_run(setup, tmp_path, monkeypatch):
    """A custom task spec is read by content: editing an instruction in place regenerates the data."""
    import dsgen.generation.backends as backends

    preset, data = setup
    spec = tmp_path / "spec.json"
    text = json.loads((Path(__file__).parents[1] / "dsgen" / "task_specs" / "sts-x2.json").read_text())
    spec.write_text(json.dumps(text))
    if "tiny-custom-spec" not in METHODS:
        METHODS.add("tiny-custom-spec", dino_recipe(description="real core, a custom spec file",
                                                    generation={"task": str(spec)}))
    decoded = []
    real = backends.decode_chunk
    monkeypatch.setattr(backends, "decode_chunk", lambda *a, **k: decoded.append(1) or real(*a, **k))
    small = replace(preset, max_inputs=4)
    plan = lambda: plan_run("tiny-custom-spec", small, 1)  # noqa: E731
    runner = lambda: Runner(tmp_path / "runs", str(data), progress=False)  # noqa: E731  (a new process each time)
    first, first_key = runner().data.training_data(plan()), runner().run_key(plan())
    n = len(decoded)
    assert n >= 1
    assert runner().data.training_data(plan()).extra == first.extra and runner().run_key(plan()) == first_key
    assert len(decoded) == n  # untouched: nothing decoded, the same key
    label = next(iter(text["labels"]))
    text["labels"][label]["instruction"] = text["labels"][label]["instruction"].replace("Task:", "Job:")
    spec.write_text(json.dumps(text))  # the same path
    assert runner().run_key(plan()) != first_key
    edited = runner().data.training_data(plan())
    assert len(decoded) > n and edited.extra["dataset_key"] != first.extra["dataset_key"]


def test_an_edited_human_source_is_a_new_run(setup, tmp_path, monkeypatch):
    """RISE's SDI classifier reads the inputs' whole source as its human class: lines beyond the run's
    own inputs change no dataset, but must change the run (a new classifier, new weights)."""
    preset, data = setup
    if "mock-sdi" not in METHODS:
        METHODS.add("mock-sdi", dino_recipe(description="mock + SDI", generator="mock-test", reweighter="sdi"))
    from dsgen.data.inputs import load_inputs

    source = tmp_path / "source.txt"
    lines = list(dict.fromkeys(Path(preset.inputs).read_text().splitlines()))
    source.write_text("\n".join(lines))
    mine = replace(preset, inputs=str(source), max_inputs=10)
    first = Runner(tmp_path / "runs", str(data), progress=False).run(plan_run("mock-sdi", mine, 1))
    drawn = set(load_inputs(str(source), 10, seed=preset.data_seed))  # the data seed's draw: positions, not texts
    source.write_text("\n".join(x if x in drawn else f"Human sentence {i} about a quiet street." for i, x in enumerate(lines)))
    MockGenerator.calls = 0
    edited = Runner(tmp_path / "runs", str(data), progress=False).run(plan_run("mock-sdi", mine, 1))
    assert edited.extra["dataset_key"] == first.extra["dataset_key"]  # the run's inputs are the same
    assert edited.extra["run_key"] != first.extra["run_key"] and MockGenerator.calls == 0


def test_stable_hash_refuses_what_json_does_not_represent_exactly():
    from dsgen.artifacts import stable_hash

    assert stable_hash({"a": [1, 2.5, "x", None, True]}) == stable_hash({"a": (1, 2.5, "x", None, True)})
    for bad in ({"path": Path("/tmp")}, {"s": {1, 2}}, {1: "int key"}, {"o": object()}):
        with pytest.raises(TypeError, match="stable_hash"):
            stable_hash(bad)


def test_a_hub_model_without_a_known_revision_is_resolved_or_refused(monkeypatch, tmp_path):
    """Before its first download a Hub model's key used to say `revision: None`, and every later run another
    key. Now the commit is resolved first, or the key refuses it with one line."""
    import dsgen.models as models
    from dsgen.errors import DsgenError

    monkeypatch.setattr(models, "_hub_cached_revision", lambda name: None)
    monkeypatch.setattr(models, "hub_source", lambda name, what: ("abc123", False))
    assert models.model_fingerprint("someone/some-model") == {"model": "someone/some-model", "revision": "abc123"}

    def offline(name, what):
        raise DsgenError(f"{what} '{name}' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")

    monkeypatch.setattr(models, "hub_source", offline)
    with pytest.raises(DsgenError, match="not in the local Hugging Face cache"):
        models.model_fingerprint("someone/some-model")


def _default_floor(preset, **training):
    """The runner tests' preset with the trainer's own floor (``min_trained_steps``) and warm-up."""
    return {k: v for k, v in {**preset.training, **training}.items() if k != "min_trained_steps"}


def test_a_run_that_trains_nothing_is_a_failed_run_never_a_score(setup, tmp_path):
    """The issue's e5-sts: a few pairs make one step, all warm-up (the default warm-up ratio), so no weight
    changes. The runner fails it with one line, writes no result, and a comparison shows it as failed."""
    from dsgen.reports.comparison import Comparison
    from dsgen.reports.tables import comparison_markdown
    from dsgen.training.fit import TrainingConfig

    preset, data = setup
    tiny = replace(preset, max_inputs=3, training=_default_floor(preset, batch_size=64))
    assert "warmup_ratio" not in tiny.training and TrainingConfig().warmup_ratio == 0.1
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    with pytest.raises(RunFailed) as err:
        runner.run(plan_run("mock-dino", tiny, 1))
    message = str(err.value)
    assert message.startswith("mock-dino (data seed 42, training seed 1): trained nothing: ")
    assert "pairs make one optimizer step, all of it warm-up (learning rate 0); use more inputs" in message
    assert "\n" not in message
    path = runner.result_path(plan_run("mock-dino", tiny, 1))
    assert not path.exists()  # no score anywhere
    failed = json.loads(path.with_suffix(".failed.json").read_text())
    assert failed["reason"].startswith("trained nothing") and failed["extra"]["training"]["weight_update"] == 0.0
    failures: list[RunFailed] = []
    results = run_many(["base", "mock-dino"], tiny, [1, 2], runner, failures=failures)
    assert "mock-dino" not in results and [f.seed for f in failures] == [1, 2]
    md = comparison_markdown(Comparison(["base"], ["sts16"], results, preset="unit", failures=failures))
    row = next(line for line in md.splitlines() if line.startswith("| mock-dino"))
    assert "failed" in row and "no score: 2 of 2 runs failed" in row and not any(c.isdigit() for c in row.split("|")[2])
    assert "- `mock-dino` (data seed 42, training seed 2): trained nothing: " in md
    assert "- `base`: no training: every run scores the same model" in md  # base named as such


def test_a_run_below_the_floor_fails_and_one_above_trains(setup, tmp_path):
    """The floor is the trainer's ``min_trained_steps`` (default 10 steps at a non-zero learning rate): 87 pairs in
    batches of 16 (6 steps, 5 at a non-zero rate) fail with the default, and train with a floor of 5."""
    preset, data = setup
    few = replace(preset, max_inputs=12, training=_default_floor(preset))
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    with pytest.raises(RunFailed, match="trained too little: 87 pairs make 6 optimizer steps, 5 with a non-zero learning "
                                        "rate, fewer than the 10 a run needs"):
        runner.run(plan_run("mock-dino", few, 1))
    enough = replace(few, training={**few.training, "min_trained_steps": 5})
    result = runner.run(plan_run("mock-dino", enough, 1))
    training = result.extra["training"]
    assert (training["optimizer_steps"], training["nonzero_lr_steps"], training["min_trained_steps"]) == (6, 5, 5)
    assert training["weight_update"] > 0


def test_a_cached_result_without_the_training_record_is_never_reused(setup, tmp_path, monkeypatch):
    """A result file made before dsgen recorded the optimizer steps and the weight update (or one whose record
    fails the rule) is not a score: the run is made again, not read back."""
    preset, data = setup
    trained = _counting_training(monkeypatch)
    mine = replace(preset, max_inputs=12)
    plan = plan_run("mock-dino", mine, 1)
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    runner.run(plan)
    path = runner.result_path(plan)
    assert len(trained) == 1
    Runner(tmp_path / "runs", str(data), progress=False).run(plan)
    assert len(trained) == 1  # a complete record: reused
    for edit in ({"drop": "nonzero_lr_steps"}, {"set": ("weight_update", 0.0)}):
        data_ = json.loads(path.read_text())
        if "drop" in edit:
            del data_["extra"]["training"][edit["drop"]]
        else:
            data_["extra"]["training"][edit["set"][0]] = edit["set"][1]
        path.write_text(json.dumps(data_))
        before = len(trained)
        again = Runner(tmp_path / "runs", str(data), progress=False).run(plan)
        assert len(trained) == before + 1 and again.extra["training"]["weight_update"] > 0  # trained again
        assert json.loads(path.read_text())["extra"]["training"]["nonzero_lr_steps"] > 0


def crash_on_training_seed_2(monkeypatch, message):
    """The regression trainer raises TypeError(message) on training seed 2 (a bug inside one run)."""
    from dsgen.training.regression import RegressionTrainer

    real = RegressionTrainer.train

    def flaky(self, train, validation, seed, progress=True):
        if seed == 2:
            raise TypeError(message)
        return real(self, train, validation, seed, progress)

    monkeypatch.setattr(RegressionTrainer, "train", flaky)


def test_an_unexpected_exception_fails_that_run_only_with_its_traceback_logged(setup, tmp_path, monkeypatch):
    """A bug inside one run (here: the trainer raises TypeError on training seed 2) marks that run failed, writes
    its traceback under logs/, and the other runs go on; an input error (a DsgenError) still stops everything."""
    from dsgen.errors import DsgenError
    from dsgen.runs.records import RunCrashed, log_path

    preset, data = setup
    mine = replace(preset, max_inputs=12)
    crash_on_training_seed_2(monkeypatch, "'<' not supported between instances of 'NoneType' and 'float'")
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    failures: list[RunFailed] = []
    results = run_many(["mock-dino", "base"], mine, [1, 2], runner, failures=failures)
    assert [r.seed for r in results["mock-dino"]] == [1] and len(results["base"]) == 2
    (crash,) = failures
    assert isinstance(crash, RunCrashed) and crash.method == "mock-dino" and crash.run == (42, 2)
    log = log_path(runner.out, plan_run("mock-dino", mine, 2))
    assert crash.log == log and log.is_relative_to(tmp_path / "runs" / "logs")
    text = log.read_text()
    assert "Traceback" in text and "TypeError: '<' not supported" in text and "flaky" in text
    assert crash.reason == f"crashed: TypeError: '<' not supported between instances of 'NoneType' and 'float' " \
                           f"(traceback in {log})"
    with pytest.raises(TypeError):  # without a failures list it is raised, as before
        run_many(["mock-dino"], mine, [2], runner)

    def bad_input(self, plan, *args):
        raise DsgenError("STS data folder /nowhere not found")

    monkeypatch.setattr(Runner, "prepare", bad_input)  # every run is prepared first (dsgen.scheduling.graph)
    with pytest.raises(DsgenError, match="/nowhere"):
        run_many(["base"], mine, [1], runner, failures=[])


def _sdi_methods():
    """mock-sdi and mock-sdi-filter: the mock generator's data, RISE's reweighter (weights, or a 10% filter)."""
    for name, config in (("mock-sdi", {}), ("mock-sdi-filter", {"filter_fraction": 0.1})):
        if name not in METHODS:
            METHODS.add(name, dino_recipe(description="mock + SDI", generator="mock-test", reweighter="sdi",
                                          reweighter_config=config))


def test_rise_and_rise_filter_share_one_sdi_fit_per_data_seed(setup, tmp_path, monkeypatch):
    """Issue 31: the SDI classifier is a function of the data, fitted once per dataset with the data seed and shared
    by rise and rise-filter over every training seed (it was refitted per run, seeded with the training seed); a new
    data seed fits again; another runner (a resumed comparison) reads the stored fit; its key moves with what it
    reads and not with how scores become weights."""
    from dsgen.reweighting.sdi import SdiClassifier

    preset, data = setup
    _sdi_methods()
    fits = []
    real = SdiClassifier.fit
    monkeypatch.setattr(SdiClassifier, "fit", lambda self, *a, **k: fits.append(a[1]) or real(self, *a, **k))
    mine = replace(preset, max_inputs=12)
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    results = run_many(["mock-sdi", "mock-sdi-filter"], mine, [(42, 1), (42, 2)], runner)
    assert fits == [42]  # one fit, seeded with the data seed, for 4 runs
    used = [r.extra["data_fits"]["reweighter"] for rs in results.values() for r in rs]
    assert len({u["key"] for u in used}) == 1 and {u["seed"] for u in used} == {42}
    assert (runner.out / "cache" / "fits" / f"sdi-classifier-{used[0]['key']}" / "fit.json").exists()
    p_d: dict[str, set] = {}  # x2 -> p_D in every run: one classifier gives an x2 the same score in every run
    for m, rs in results.items():
        for r in rs:
            for p in read_pairs(runner.result_path(plan_run(m, mine, r.seed)).with_suffix(".train.jsonl")):
                p_d.setdefault(p.text_b, set()).add(p.extra["p_d"])
    assert len(p_d) > 20 and all(len(v) == 1 for v in p_d.values())
    other = run_many(["mock-sdi"], mine, [(7, 1)], runner)["mock-sdi"][0]
    assert fits == [42, 7] and other.extra["data_fits"]["reweighter"]["key"] != used[0]["key"]
    again = Runner(tmp_path / "runs", str(data), progress=False)
    again.run(plan_run("mock-sdi-filter", mine, 3))  # a new training seed, another runner: the stored fit
    assert fits == [42, 7]

    def key(plan):
        stage = plan.reweighter
        return again.data.fit_identity(stage.data_fit(), plan, again.data.data_inputs(plan))[0]

    base = key(plan_run("mock-sdi", mine, 1))
    assert key(plan_run("mock-sdi-filter", mine, 2)) == base  # the filter and the training seed: not the fit's
    assert key(plan_run("mock-sdi", replace(mine, reweighting={"sdi": {**mine.reweighting["sdi"], "temperature": 0.9}}), 1)) == base
    assert key(plan_run("mock-sdi", mine, 1, data_seed=7)) != base  # the data seed
    assert key(plan_run("mock-sdi", replace(mine, postprocess={"max_per_x1_label": 1}), 1)) != base  # the filters
    assert key(plan_run("mock-sdi", replace(mine, max_inputs=11), 1)) != base  # the inputs, hence the dataset
    assert key(plan_run("mock-sdi", replace(mine, reweighting={"sdi": {**mine.reweighting["sdi"], "epochs": 2.0}}), 1)) != base
