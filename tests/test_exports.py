"""Exports other tools read, checked with those tools: a dataset folder through ``datasets`` and
``huggingface_hub``, a model folder through ``sentence-transformers`` and ``dsgen eval``, results
through MTEB's own result loader."""

import json
import os
import shutil

import pytest

from dsgen.encoders import load_encoder
from tests.cli_process import OFFLINE
from tests.conftest import require
from tests.test_cli import dsgen, tree


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    """One run of rise (a reweighter: weights to export) on tiny models, its model kept."""
    root = tmp_path_factory.mktemp("exports")
    preset = root / "tiny.toml"
    preset.write_text(f"""seeds = [1]
data_seeds = [3]
max_inputs = 10
dev_max_inputs = 10
tasks = ["sts16", "stsb"]
[generation]
generator = "{tiny_lm_dir}"
device = "cpu"
per_label = 2
[generation.sampling]
max_new_tokens = 8
[training]
encoder = "{tiny_encoder_dir}"
device = "cpu"
batch_size = 16
warmup_ratio = 0.0
min_trained_steps = 1
[reweighting.sdi]
encoder = "{tiny_encoder_dir}"
epochs = 1.0
""")
    env = {"DSGEN_DATA_DIR": str(sts_data_dir), **OFFLINE}
    run = dsgen("run", "rise", "--preset", str(preset), "--save-model", "--out", str(root / "runs"), "--quiet", env=env)
    assert run.returncode == 0, run.stderr
    (result,) = sorted((root / "runs" / "results").rglob("data-3-seed-1.json"))
    return root, preset, env, result


def test_a_runs_dataset_is_a_folder_datasets_loads_with_its_card(exported, tmp_path):
    from datasets import load_dataset
    from huggingface_hub import DatasetCard

    root, preset, env, result = exported
    out = tmp_path / "ds"
    res = dsgen("export", "dataset", "rise", "--preset", str(preset), "--runs", str(root / "runs"), "--out", str(out),
                env=env)
    assert res.returncode == 0, res.stderr
    ds = load_dataset(str(out))
    assert set(ds) == {"train", "validation"}
    assert {"text_a", "text_b", "label", "weight", "source"} <= set(ds["train"].column_names)
    train = [json.loads(line) for line in result.with_suffix(".train.jsonl").read_text().splitlines()]
    assert len(ds["train"]) == len(train) and sorted(ds["train"]["weight"]) == sorted(p.get("weight", 1.0) for p in train)
    assert len(set(ds["train"]["weight"])) > 1  # RISE's weights travel with the pairs
    card = DatasetCard.load(out / "README.md")
    meta = card.data.to_dict()
    assert meta["task_categories"] == ["sentence-similarity"] and "synthetic" in meta["tags"]
    assert meta["size_categories"] == ["n<1K"] and meta["configs"][0]["config_name"] == "default" and meta["license"]
    body = card.text
    for needle in ("Task spec (every instruction)", "Write two sentences", "postprocessing, counts", "reweighter",
                   '"run_key"', '"dsgen_version"', "dsgen export dataset rise", "huggingface-cli upload"):
        assert needle in body, needle


def test_the_card_describes_rises_dev_set_and_fingerprints_a_generator_recorded_by_name(exported, tmp_path):
    """RISE generates its validation set apart (a second cached dataset): the card says so and describes
    it. A generator the sidecar records by name only (the LM was loaded elsewhere, e.g. by a Ray worker)
    gets its fingerprint at export time, marked as such."""
    from huggingface_hub import DatasetCard

    from dsgen.artifacts import read_json, sidecar_path, write_json
    from dsgen.export.dataset_folder import card_body, from_pairs_file
    from dsgen.models import model_fingerprint

    root, preset, env, result = exported
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    extra = json.loads(result.read_text())["extra"]
    assert extra["dev_dataset_key"] != extra["dataset_key"]
    (main,) = (runs / "cache" / "datasets").glob(f"*-{extra['dataset_key']}.jsonl")
    meta = read_json(sidecar_path(main))
    name = meta["generator"]["name"]
    write_json(sidecar_path(main), {**meta, "generator": {"name": name}})  # as a run on the ray backend records it
    out = tmp_path / "ds"
    res = dsgen("export", "dataset", "rise", "--preset", str(preset), "--runs", str(runs), "--out", str(out), env=env)
    assert res.returncode == 0, res.stderr
    body = DatasetCard.load(out / "README.md").text
    dev = body.split("## Validation set (generated apart)", 1)[1].split("\n## ", 1)[0]
    assert f"from {extra['dev_inputs']} other inputs (`stsb-validation`)" in dev
    assert f"into {extra['dev_generated_pairs']} pairs" in dev and f"({extra['validation_pairs']} pairs after" in dev
    assert f"dataset key `{extra['dev_dataset_key']}`" in dev and '"fingerprint": {' in dev and "counts: `{" in dev
    assert json.loads(body.split("## Where it came from", 1)[1].split("```json", 1)[1].split("```", 1)[0])[
        "dev_dataset_key"] == extra["dev_dataset_key"]
    fingerprint = json.dumps(model_fingerprint(name), sort_keys=True)
    generation = body.split("## Generation", 1)[1].split("\n## ", 1)[0]
    assert f'"fingerprint": {fingerprint}, "fingerprint_at": "export"' in generation
    # the same for a pairs file exported as it left the generator
    assert f'"fingerprint": {fingerprint}, "fingerprint_at": "export"' in card_body(from_pairs_file(main))


def test_a_generated_pairs_file_exports_as_it_left_the_generator(tiny_lm_dir, tmp_path, sts_data_dir):
    from datasets import load_dataset

    inputs = tmp_path / "in.txt"
    inputs.write_text("A man plays a guitar.\nTwo dogs run in a park.\n")
    gen = dsgen("generate", "--inputs", str(inputs), "--generator", str(tiny_lm_dir), "--max-new-tokens", "8",
                "--per-label", "2", "--device", "cpu", "--out", str(tmp_path / "pairs.jsonl"), "--quiet")
    assert gen.returncode == 0, gen.stderr
    res = dsgen("export", "pairs", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path / "ds"),
                env=OFFLINE)
    assert res.returncode == 0, res.stderr
    ds = load_dataset(str(tmp_path / "ds"))
    n = sum(1 for _ in (tmp_path / "pairs.jsonl").open())
    assert list(ds) == ["train"] and len(ds["train"]) == n and "weight" not in ds["train"].column_names


def test_a_kept_model_loads_with_sentence_transformers_and_scores_what_the_run_reported(exported, tmp_path):
    from huggingface_hub import ModelCard
    from sentence_transformers import SentenceTransformer

    root, preset, env, result = exported
    folder = result.with_suffix(".model")
    model = SentenceTransformer(str(folder), device="cpu")  # no dsgen code needed
    assert model.encode(["a sentence"]).shape[0] == 1
    reported = json.loads(result.read_text())
    origin = json.loads((folder / "dsgen_provenance.json").read_text())
    assert origin["run_key"] == reported["extra"]["run_key"] and origin["dataset_key"] == reported["extra"]["dataset_key"]
    # the card is sentence-transformers' own, filled with the base model spec, the training dataset
    # (named by its dataset key), the loss the trainer used, and the run's score on every task
    card = ModelCard.load(folder / "README.md")
    base = reported["model"]
    assert card.data.model_name == f"dsgen rise ({base}), preset tiny" and f"# dsgen rise ({base}), preset tiny" in card.text
    dataset = f"dsgen rise dataset {reported['extra']['dataset_key']}"
    assert f"#### {dataset}" in card.text and f"- **Training Dataset:**\n    - {dataset}" in card.text
    assert "loss:WeightedCosineSimilarityLoss" in card.data.tags and "rise" in card.data.tags
    assert "* Loss: <code>dsgen.training.losses" in card.text and "WeightedCosineSimilarityLoss</code>" in card.text
    on_card = {(r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    for task in ("sts16", "stsb"):
        assert on_card[(task, "spearman_cosine")] == round(reported["tasks"][task]["spearman"] / 100, 6)
        assert on_card[(task, "pearson_cosine")] == round(reported["tasks"][task]["pearson"] / 100, 6)
    again = dsgen("eval", str(folder), "--tasks", "sts16,stsb", "--device", "cpu", "--json", str(tmp_path / "e.json"),
                  env=env)
    assert again.returncode == 0, again.stderr
    scored = json.loads((tmp_path / "e.json").read_text())["tasks"]
    for task in ("sts16", "stsb"):
        assert scored[task]["spearman"] == pytest.approx(reported["tasks"][task]["spearman"], abs=0.01)


@pytest.mark.slow
def test_a_raw_encoder_keeps_its_standardisation_in_the_folder(tmp_path, sts_data_dir):
    """``lm:...?standardize=1`` is saved with library modules only (a Dense layer holds the statistics)."""
    from sentence_transformers import SentenceTransformer

    from dsgen.data.sts import using_data_dir
    from dsgen.training.model_folder import portable

    with using_data_dir(sts_data_dir):  # its statistics are read from the STS data
        model = load_encoder("smollm2-l4", "cpu")
    portable(model).save(str(tmp_path / "m"))
    again = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    texts = ["A man is playing a guitar.", "Two dogs are running through a field of grass."]
    a, b = model.encode(texts, convert_to_tensor=True), again.encode(texts, convert_to_tensor=True)
    assert (a - b).abs().max() < 1e-4 and a.abs().max() > 0.5


def test_results_load_with_mtebs_own_loader_and_equal_dsgens(exported, tmp_path):
    mteb = require("mteb", "mteb")
    root, preset, env, result = exported
    res = dsgen("export", "mteb", str(root / "runs"), "--out", str(tmp_path / "mt"), env=env)
    assert res.returncode == 0, res.stderr
    loaded = mteb.ResultCache(tmp_path / "mt").load_results(include_remote=False)
    ours = json.loads(result.read_text())
    (model,) = loaded.model_results
    assert model.model_name == f"dsgen/rise-tiny-{ours['extra']['variant']}-data3-seed1"
    assert model.model_revision == ours["extra"]["run_key"]
    by_task = {t.task_name: t for t in model.task_results}
    assert set(by_task) == {"STS16", "STSBenchmark"}
    for task, name in (("sts16", "STS16"), ("stsb", "STSBenchmark")):
        (scores,) = by_task[name].scores["test"]
        # equal to dsgen's, on MTEB's scale and to the 6 decimals MTEB keeps
        assert scores["main_score"] == round(ours["tasks"][task]["spearman"] / 100, 6)
        assert scores["manhattan_pearson"] == round(ours["tasks"][task]["manhattan_pearson"] / 100, 6)
        assert by_task[name].dataset_revision == mteb.get_task(name).metadata.dataset["revision"]


def test_runs_of_two_methods_on_a_published_encoder_are_two_models_in_mtebs_loader(exported, tmp_path):
    """Issue 30: every trained ``minilm-l6`` run was filed under the published all-MiniLM-L6-v2 name and
    revision, so two methods' runs overwrote each other. Only the untrained model evaluated as MTEB does
    takes the published name; a trained run is named by method, preset, variant and seeds at revision
    its run key. The ``base`` runs of every seed are one model (written once); two results that would
    land in one task file with other scores are refused."""
    import copy

    mteb = require("mteb", "mteb")
    root, preset, env, result = exported
    ours = json.loads(result.read_text())
    results = tmp_path / "runs" / "results" / "quick"

    def put(method, variant, key, shift, data_seed=3, preprocess="raw", trained=True):
        """The fixture's run as a run of ``method`` on minilm-l6 would record it (the preset's alias)."""
        data = copy.deepcopy(ours)
        data.update(model="minilm-l6", method=method, preset="quick", data_seed=data_seed)
        data["extra"].update(run_key=key, variant=variant, evaluation_data={"preprocess": preprocess, "dtype": "float32"})
        if not trained:  # base: the plan has no trainer, and nothing was trained
            data["extra"]["plan"] = {**data["extra"]["plan"], "trainer": None}
            data["extra"].pop("training", None)
        for score in data["tasks"].values():
            score.update({k: v + shift for k, v in score.items() if k != "n" and isinstance(v, float)})
        path = results / method / variant / f"data-{data_seed}-seed-1.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return data

    rise, dino = put("rise", "v-rise", "key-rise", 0.0), put("dino", "v-dino", "key-dino", 2.0)
    base = put("base", "v-base", "key-base-3", -5.0, trained=False)
    put("base", "v-base", "key-base-4", -5.0, data_seed=4, trained=False)  # the same model and scores: written once
    senteval = put("base", "v-senteval", "key-senteval", -7.0, preprocess="senteval", trained=False)
    res = dsgen("export", "mteb", str(tmp_path / "runs"), "--out", str(tmp_path / "mt"), env=env)
    assert res.returncode == 0, res.stderr
    loaded = mteb.ResultCache(tmp_path / "mt").load_results(include_remote=False)
    published = mteb.get_model_meta("sentence-transformers/all-MiniLM-L6-v2")
    got = {(m.model_name, m.model_revision): {t.task_name: t.scores["test"][0]["main_score"] for t in m.task_results}
           for m in loaded.model_results}
    expected = {("dsgen/rise-quick-v-rise-data3-seed1", "key-rise"): rise, ("dsgen/dino-quick-v-dino-data3-seed1", "key-dino"): dino,
                (published.name, published.revision): base,
                ("dsgen/base-quick-v-senteval-data3-seed1", "key-senteval"): senteval}
    assert set(got) == set(expected)
    for model, data in expected.items():
        assert got[model] == {"STS16": round(data["tasks"]["sts16"]["spearman"] / 100, 6),
                              "STSBenchmark": round(data["tasks"]["stsb"]["spearman"] / 100, 6)}, model
    put("base", "v-base", "key-base-5", -6.0, data_seed=5, trained=False)  # the published model, other scores
    clash = dsgen("export", "mteb", str(tmp_path / "runs"), "--out", str(tmp_path / "mt2"), env=env)
    assert clash.returncode == 2 and clash.stderr.count("\n") == 1 and "with other STS16 scores" in clash.stderr, clash.stderr
    assert not (tmp_path / "mt2").exists()


def test_dataset_and_model_folders_replace_only_their_own_kind(exported, tmp_path):
    """Issue 30: an export replaced whatever folder it was given. The dataset exports and the model
    folders (``--save-model``, and :func:`save_model_folder` itself) replace only a folder dsgen wrote as
    that kind (its marker), anything else only on purpose, and never a folder holding runs."""
    from sentence_transformers import SentenceTransformer

    from dsgen.errors import DsgenError
    from dsgen.evaluation.results import Result
    from dsgen.training.model_folder import save_model_folder

    def kind(folder):
        return json.loads((folder / "dsgen_export.json").read_text())["kind"]

    root, preset, env, result = exported
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own notes\n")
    export = ("export", "dataset", "rise", "--preset", str(preset), "--runs", str(runs))
    before = tree(tmp_path)
    for args, message in (((*export, "--out", str(runs)), "it holds dsgen's runs"),
                          ((*export, "--out", str(mine)), "not empty and not a dataset folder dsgen wrote; choose another "
                                                          "folder or give --overwrite"),
                          ((*export, "--out", str(runs), "--overwrite"), "it holds dsgen's runs")):
        out = dsgen(*args, env=env)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
        assert tree(tmp_path) == before
    for args in ((*export, "--out", str(mine), "--overwrite"), (*export, "--out", str(mine))):  # then it is its own
        out = dsgen(*args, env=env)
        assert out.returncode == 0, out.stderr
    assert not (mine / "notes.txt").exists() and kind(mine) == "dataset-folder"

    kept = next(runs.rglob("data-3-seed-1.model"))
    assert kind(kept) == "model-folder"  # the runner marks what it keeps
    model, run = SentenceTransformer(str(kept), device="cpu"), Result.load(next(runs.rglob(result.name)))
    save_model_folder(model, kept, run, "enc", "d")  # its own model folder: replaced
    (kept / "dsgen_export.json").unlink()  # as kept before dsgen marked its folders: still its own
    save_model_folder(model, kept, run, "enc", "d")
    assert kind(kept) == "model-folder"
    for folder, kwargs, message in ((mine, {}, "not a model folder dsgen wrote (it is a dataset folder); choose another folder"),
                                    (runs / "results", {"overwrite": True}, "it holds dsgen's runs")):
        before = tree(tmp_path)
        with pytest.raises(DsgenError) as refused:
            save_model_folder(model, folder, run, "enc", "d", **kwargs)
        assert message in str(refused.value) and "--overwrite to" not in str(refused.value)  # the runner has none
        assert tree(tmp_path) == before
    save_model_folder(model, mine, run, "enc", "d", overwrite=True)
    assert kind(mine) == "model-folder" and SentenceTransformer(str(mine), device="cpu")


@pytest.mark.slow
def test_the_minilm_export_matches_the_numbers_mteb_publishes(tmp_path, minilm_mteb_result):
    mteb = require("mteb", "mteb")
    from tests.evaluation.test_sts_eval import MTEB_MINILM_L6

    assert dsgen("export", "mteb", str(minilm_mteb_result), "--out", str(tmp_path / "mt")).returncode == 0
    loaded = mteb.ResultCache(tmp_path / "mt").load_results(include_remote=False)
    (model,) = loaded.model_results
    assert model.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    names = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
             "stsb": "STSBenchmark", "sickr": "SICK-R"}
    got = {t.task_name: t.scores["test"][0]["main_score"] * 100 for t in model.task_results}
    for task, published in MTEB_MINILM_L6.items():
        assert got[names[task]] == pytest.approx(published, abs=0.011), task


def test_a_folder_exported_again_under_the_same_name_loads_its_new_pairs(tmp_path):
    """`datasets` keys its cache of a local folder by the folder's name and the card's file patterns:
    the Parquet files are named by their contents, so a second export named like the first is not
    answered with the first one's rows from the cache."""
    from datasets import load_dataset

    from dsgen.data.pairs import Pair
    from dsgen.export.dataset_folder import DatasetExport, write_dataset_folder

    loaded = []
    for n, where in ((11, "a"), (27, "b")):
        pairs = [Pair(f"sentence {i}", f"other {i}", 0.5) for i in range(n)]
        folder = write_dataset_folder(DatasetExport("x", {"train": pairs}), tmp_path / where / "ds")
        loaded.append(len(load_dataset(str(folder), cache_dir=str(tmp_path / "hf-cache"))["train"]))
    assert loaded == [11, 27]


PREFIX_TEMPLATE = "Represent this sentence for similarity: {}"


@pytest.fixture(scope="module")
def templated(tmp_path_factory, tiny_encoder_dir, sts_data_dir):
    """A tiny encoder scored on sts16 with its sentences wrapped in a template, as the runner scores a model
    its trainer trained on templated text; returns a function saving it with a given template."""
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.training.model_folder import save_model_folder

    model = load_encoder(str(tiny_encoder_dir))
    evaluator = StsEvaluator(["sts16"], str(sts_data_dir))
    plain = evaluator.evaluate(model, name=str(tiny_encoder_dir)).tasks["sts16"].spearman

    def save(template):
        result = evaluator.evaluate(model, name=str(tiny_encoder_dir), template=template)
        assert abs(result.tasks["sts16"].spearman - plain) > 0.1  # the template matters to this model
        result.method, result.preset, result.seed, result.data_seed = "gense", "tiny", 1, 1
        result.extra = {"run_key": "r", "dataset_key": "d", "training": {"text_template": template}}
        folder = tmp_path_factory.mktemp("templated") / "m.model"
        return save_model_folder(model, folder, result, str(tiny_encoder_dir), "dsgen gense dataset d"), result

    return save


def test_a_prefix_template_travels_as_the_folders_default_prompt(templated, tmp_path, sts_data_dir):
    """The trainer's template (recorded in the result) is kept in the folder: a prefix becomes
    sentence-transformers' default prompt, so the library alone and `dsgen eval` score it as the run did."""
    from sentence_transformers import SentenceTransformer

    from dsgen.training.model_folder import folder_template

    folder, result = templated(PREFIX_TEMPLATE)
    assert json.loads((folder / "dsgen_provenance.json").read_text())["text_template"] == PREFIX_TEMPLATE
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    assert config["prompts"][config["default_prompt_name"]] == PREFIX_TEMPLATE[:-2]
    assert folder_template(folder) is None  # nothing left for an evaluator to apply
    model = SentenceTransformer(str(folder), device="cpu")
    a = model.encode(["A man plays a guitar."], convert_to_tensor=True)
    b = model.encode([PREFIX_TEMPLATE.format("A man plays a guitar.")], prompt="", convert_to_tensor=True)
    assert (a - b).abs().max() < 1e-5
    res = dsgen("eval", str(folder), "--tasks", "sts16", "--device", "cpu", "--json", str(tmp_path / "e.json"),
                env={"DSGEN_DATA_DIR": str(sts_data_dir)})
    assert res.returncode == 0, res.stderr
    scored = json.loads((tmp_path / "e.json").read_text())["tasks"]["sts16"]["spearman"]
    assert scored == pytest.approx(result.tasks["sts16"].spearman, abs=0.01)


def test_genses_template_is_kept_for_the_evaluator(templated):
    """GenSE's template puts text after the sentence, which a sentence-transformers prompt cannot: the
    folder keeps it in its provenance and :func:`folder_template` hands it to an evaluator."""
    from dsgen.training.model_folder import folder_template
    from dsgen.training.contrastive import GENSE_PROMPT

    folder, _ = templated(GENSE_PROMPT)
    assert json.loads((folder / "dsgen_provenance.json").read_text())["text_template"] == GENSE_PROMPT
    assert json.loads((folder / "config_sentence_transformers.json").read_text())["default_prompt_name"] is None
    assert folder_template(folder) == GENSE_PROMPT


def test_dsgen_eval_scores_a_gense_folder_on_its_template(templated, tmp_path, sts_data_dir):
    from dsgen.training.contrastive import GENSE_PROMPT

    folder, result = templated(GENSE_PROMPT)
    res = dsgen("eval", str(folder), "--tasks", "sts16", "--device", "cpu", "--json", str(tmp_path / "e.json"),
                env={"DSGEN_DATA_DIR": str(sts_data_dir)})
    assert res.returncode == 0, res.stderr
    scored = json.loads((tmp_path / "e.json").read_text())["tasks"]["sts16"]["spearman"]
    assert scored == pytest.approx(result.tasks["sts16"].spearman, abs=0.01)


def _unwritable_targets(tmp_path):
    """Folders that cannot be written: under /proc (for root too), and a read-only folder (not for root)."""
    targets = ["/proc/dsgen-export", "/proc/nope/dsgen-export"]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        targets += [str(ro / "ds"), str(ro / "sub" / "ds")]
    return targets


def test_bad_export_input_gets_one_line_exit_2_and_writes_nothing(exported, tmp_path):
    """An export into a folder that cannot be written, or of a result of another schema version."""
    from dsgen.artifacts import read_json, write_json

    root, preset, env, result = exported
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    (pairs,) = (runs / "cache" / "datasets").glob(f"*-{read_json(result)['extra']['dataset_key']}.jsonl")
    cases = []
    for target in _unwritable_targets(tmp_path):
        cases += [(["export", "dataset", "rise", "--preset", str(preset), "--runs", str(runs), "--out", target], "cannot"),
                  (["export", "pairs", str(pairs), "--out", target], "cannot")]
    other = tmp_path / "other-schema"
    shutil.copytree(root / "runs", other)
    (copy,) = other.rglob(result.name)
    write_json(copy, {**read_json(copy), "schema_version": 9})
    cases.append((["export", "dataset", "rise", "--preset", str(preset), "--runs", str(other), "--out",
                   str(tmp_path / "ds")], "not a dsgen result file of schema version 1"))
    before = tree(tmp_path)
    for args, message in cases:
        out = dsgen(*args, env=env)
        assert out.returncode == 2, (args, out.stdout + out.stderr)
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, (args, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
        assert tree(tmp_path) == before, args


@pytest.mark.slow
def test_a_raw_encoder_run_saved_and_evaluated_again_scores_what_it_reported(tmp_path, tiny_lm_dir, sts_data_dir):
    """A run on the raw encoder spec (``standardize=1``) with ``--save-model``; ``dsgen eval`` of the
    folder gives the reported score to 0.01: the standardisation statistics travel with the model."""
    spec = "lm:smollm2-135m?layers=2&pooling=mean&token_norm=1&standardize=1"
    preset = tmp_path / "raw.toml"
    preset.write_text(f"""seeds = [1]
data_seed = 3
max_inputs = 8
tasks = ["sts16"]
[generation]
generator = "{tiny_lm_dir}"
device = "cpu"
per_label = 2
[generation.sampling]
max_new_tokens = 8
[training]
encoder = "{spec}"
device = "cpu"
batch_size = 16
epochs = 1
learning_rate = 1e-3
model_selection = false
warmup_ratio = 0.0
min_trained_steps = 1
""")
    env = {"DSGEN_DATA_DIR": str(sts_data_dir), **OFFLINE}
    run = dsgen("run", "dino", "--preset", str(preset), "--save-model", "--out", str(tmp_path / "runs"), "--quiet", env=env)
    assert run.returncode == 0, run.stderr
    (result,) = (tmp_path / "runs" / "results").rglob("data-3-seed-1.json")
    reported = json.loads(result.read_text())
    assert reported["model"] == spec and reported["extra"]["training"]
    folder = result.with_suffix(".model")
    assert json.loads((folder / "dsgen_provenance.json").read_text())["base_model"] == spec
    again = dsgen("eval", str(folder), "--tasks", "sts16", "--device", "cpu", "--json", str(tmp_path / "e.json"), env=env)
    assert again.returncode == 0, again.stderr
    scored = json.loads((tmp_path / "e.json").read_text())["tasks"]["sts16"]
    assert scored["spearman"] == pytest.approx(reported["tasks"]["sts16"]["spearman"], abs=0.01)
    assert scored["pearson"] == pytest.approx(reported["tasks"]["sts16"]["pearson"], abs=0.01)


def _result_file(path, method, trained=True, steps=20, run_key="k", shift=0.0):
    """A result file as dsgen writes it: a trained run (its training log), ``base`` (no trainer) or, with ``method``
    None, ``dsgen eval``'s."""
    from dsgen.evaluation.results import Result, TaskScore

    score = 70.0 + shift
    tasks = {t: TaskScore(score, score, 10, score, score, score, score) for t in ("sts16", "stsb")}
    extra = {"run_key": run_key, "variant": "v", "evaluation_data": {"preprocess": "raw", "dtype": "float32"}}
    if method is not None:
        extra["plan"] = {"trainer": {"trainer": "regression"} if trained else None}
    if method is not None and trained:
        extra["training"] = {"optimizer_steps": steps, "nonzero_lr_steps": steps,
                             "weight_update": 0.01 if steps else 0.0, "min_trained_steps": 10}
    result = Result(model="tiny", tasks=tasks, method=method, preset="unit" if method else None,
                    seed=1 if method else None, data_seed=1 if method else None, extra=extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    result.save(path)
    return path


def test_mteb_export_skips_failed_stale_and_untrained_runs_saying_so(tmp_path):
    """Issue 39: ``export mteb`` exported every result file under a folder. A run whose failure record lies beside
    its result (it failed since), or whose training log shows it trained nothing, is skipped with one line each;
    a trained run, ``base`` and a ``dsgen eval`` result are exported."""
    mteb = require("mteb", "mteb")
    from tests.test_cli import dsgen

    runs = tmp_path / "runs"
    results = runs / "results" / "unit"
    _result_file(results / "dino" / "v" / "data-1-seed-1.json", "dino", run_key="dino-key")
    stale = _result_file(results / "rise" / "v" / "data-1-seed-1.json", "rise", run_key="rise-key", shift=1)
    stale.with_suffix(".failed.json").write_text(json.dumps({"method": "rise", "reason": "trained nothing"}))
    _result_file(results / "human" / "v" / "data-1-seed-1.json", "human", steps=0, run_key="human-key", shift=2)
    _result_file(results / "base" / "v" / "data-1-seed-1.json", "base", trained=False, run_key="base-key", shift=3)
    _result_file(runs / "eval" / "tiny.json", None, shift=4)
    res = dsgen("export", "mteb", str(runs), "--out", str(tmp_path / "mt"))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    skipped = [line for line in lines if line.startswith("skipped")]
    assert len(skipped) == 2, res.stdout
    assert any("rise" in line and "failed" in line for line in skipped), skipped
    assert any("human" in line and "trained nothing" in line for line in skipped), skipped
    loaded = mteb.ResultCache(tmp_path / "mt").load_results(include_remote=False)
    revisions = sorted(m.model_revision for m in loaded.model_results)
    assert len(revisions) == 3 and "dino-key" in revisions and "base-key" in revisions
    assert "rise-key" not in revisions and "human-key" not in revisions
    nothing = dsgen("export", "mteb", str(stale), "--out", str(tmp_path / "mt2"))
    assert nothing.returncode == 2 and nothing.stderr.count("\n") == 1 and "failed" in nothing.stderr, nothing.stderr
    assert not (tmp_path / "mt2").exists()


def test_a_run_made_with_overrides_is_exported_with_the_same_overrides(exported, tmp_path, tiny_encoder_dir):
    """Issue 39: `export dataset` had no --generator / --encoder, so a run made with those overrides could not be
    exported. A run of rise with --encoder (another variant of the same method, in a folder of its own): export without
    the override finds the preset's run, with it the override's run."""
    root, preset, env, _ = exported
    runs = tmp_path / "runs"
    shutil.copytree(root / "runs", runs)
    made = dsgen("run", "rise", "--preset", str(preset), "--encoder", str(tiny_encoder_dir), "--out", str(runs),
                 "--quiet", env=env)
    assert made.returncode == 0, made.stderr
    made = sorted((runs / "results").rglob("data-3-seed-1.json"))
    assert len(made) == 2  # the preset's variant and the override's, in folders of their own
    keys = {json.loads(p.read_text())["extra"]["run_key"] for p in made}  # the same encoder: the same run key
    found = set()
    for name, extra in (("plain", []), ("encoder", ["--encoder", str(tiny_encoder_dir)])):
        res = dsgen("export", "dataset", "rise", "--preset", str(preset), "--runs", str(runs), *extra, "--out",
                    str(tmp_path / name), env=env)
        assert res.returncode == 0, res.stderr
        card = (tmp_path / name / "README.md").read_text()
        found |= {key for key in keys if f'"run_key": "{key}"' in card}
    assert found == keys
    other = dsgen("export", "dataset", "rise", "--preset", str(preset), "--runs", str(runs), "--encoder", "minilm-l6",
                  "--out", str(tmp_path / "other"), env=env)
    assert other.returncode == 2 and "no run of rise" in other.stderr  # the override names the run looked for
