"""Exports other tools read, checked with those tools: a dataset folder through ``datasets`` and
``huggingface_hub``, a model folder through ``sentence-transformers`` and ``dsgen eval``, results
through MTEB's own result loader."""

import json

import pytest

from tests.test_cli import dsgen


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
[reweighting.sdi]
encoder = "{tiny_encoder_dir}"
epochs = 1.0
""")
    env = {"DSGEN_DATA_DIR": str(sts_data_dir), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
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


def test_a_generated_pairs_file_exports_as_it_left_the_generator(tiny_lm_dir, tmp_path, sts_data_dir):
    from datasets import load_dataset

    inputs = tmp_path / "in.txt"
    inputs.write_text("A man plays a guitar.\nTwo dogs run in a park.\n")
    gen = dsgen("generate", "--inputs", str(inputs), "--generator", str(tiny_lm_dir), "--max-new-tokens", "8",
                "--per-label", "2", "--device", "cpu", "--out", str(tmp_path / "pairs.jsonl"), "--quiet")
    assert gen.returncode == 0, gen.stderr
    res = dsgen("export", "pairs", str(tmp_path / "pairs.jsonl"), "--out", str(tmp_path / "ds"),
                env={"HF_DATASETS_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr
    ds = load_dataset(str(tmp_path / "ds"))
    n = sum(1 for _ in (tmp_path / "pairs.jsonl").open())
    assert list(ds) == ["train"] and len(ds["train"]) == n and "weight" not in ds["train"].column_names


def test_a_kept_model_loads_with_sentence_transformers_and_scores_what_the_run_reported(exported, tmp_path):
    from sentence_transformers import SentenceTransformer

    root, preset, env, result = exported
    folder = result.with_suffix(".model")
    model = SentenceTransformer(str(folder), device="cpu")  # no dsgen code needed
    assert model.encode(["a sentence"]).shape[0] == 1
    card = (folder / "README.md").read_text()
    assert "sts16" in card and "dsgen" in card and json.loads((folder / "dsgen_provenance.json").read_text())["run_key"]
    again = dsgen("eval", str(folder), "--tasks", "sts16,stsb", "--device", "cpu", "--json", str(tmp_path / "e.json"),
                  env=env)
    assert again.returncode == 0, again.stderr
    reported = json.loads(result.read_text())["tasks"]
    scored = json.loads((tmp_path / "e.json").read_text())["tasks"]
    for task in ("sts16", "stsb"):
        assert scored[task]["spearman"] == pytest.approx(reported[task]["spearman"], abs=0.01)


@pytest.mark.slow
def test_a_raw_encoder_keeps_its_standardisation_in_the_folder(tmp_path, sts_data_dir):
    """``lm:...?standardize=1`` is saved with library modules only (a Dense layer holds the statistics)."""
    from sentence_transformers import SentenceTransformer

    from dsgen.export.model_folder import portable
    from dsgen.models import load_encoder

    model = load_encoder("smollm2-l4", "cpu")
    portable(model).save(str(tmp_path / "m"))
    again = SentenceTransformer(str(tmp_path / "m"), device="cpu")
    texts = ["A man is playing a guitar.", "Two dogs are running through a field of grass."]
    a, b = model.encode(texts, convert_to_tensor=True), again.encode(texts, convert_to_tensor=True)
    assert (a - b).abs().max() < 1e-4 and a.abs().max() > 0.5


def test_results_load_with_mtebs_own_loader_and_equal_dsgens(exported, tmp_path):
    mteb = pytest.importorskip("mteb")
    root, preset, env, result = exported
    res = dsgen("export", "mteb", str(root / "runs"), "--out", str(tmp_path / "mt"), env=env)
    assert res.returncode == 0, res.stderr
    loaded = mteb.ResultCache(tmp_path / "mt").load_results(include_remote=False)
    ours = json.loads(result.read_text())
    (model,) = loaded.model_results
    assert model.model_name.startswith("dsgen/rise-tiny-data3-seed1") and model.model_revision == ours["extra"]["run_key"]
    by_task = {t.task_name: t for t in model.task_results}
    assert set(by_task) == {"STS16", "STSBenchmark"}
    for task, name in (("sts16", "STS16"), ("stsb", "STSBenchmark")):
        (scores,) = by_task[name].scores["test"]
        # equal to dsgen's, on MTEB's scale and to the 6 decimals MTEB keeps
        assert scores["main_score"] == round(ours["tasks"][task]["spearman"] / 100, 6)
        assert scores["manhattan_pearson"] == round(ours["tasks"][task]["manhattan_pearson"] / 100, 6)
        assert by_task[name].dataset_revision == mteb.get_task(name).metadata.dataset["revision"]


@pytest.mark.slow
def test_the_minilm_export_matches_the_numbers_mteb_publishes(tmp_path, sts_data_dir):
    mteb = pytest.importorskip("mteb")
    from tests.evaluation.test_sts_eval import MTEB_MINILM_L6

    res = dsgen("eval", "minilm-l6", "--tasks", "mteb", "--device", "cpu", "--json", str(tmp_path / "m.json"),
                env={"DSGEN_DATA_DIR": str(sts_data_dir)})
    assert res.returncode == 0, res.stderr
    assert dsgen("export", "mteb", str(tmp_path / "m.json"), "--out", str(tmp_path / "mt")).returncode == 0
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
