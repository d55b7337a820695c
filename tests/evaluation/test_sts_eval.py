import hashlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from dsgen.errors import DsgenError
from dsgen.evaluation.evaluator import StsEvaluator
from dsgen.evaluation.results import Result, TaskScore
from dsgen.evaluation.tables import comparison_frame, to_markdown, to_rich
from dsgen.evaluation.tasks import DEFAULT_TASKS, MTEB_TASKS, TASKS, parse_tasks

# MTEB's published scores for sentence-transformers/all-MiniLM-L6-v2 (main score cosine_spearman x100),
# from the embeddings-benchmark results repository (results/sentence-transformers__all-MiniLM-L6-v2/
# 8b3219a9.../<task>.json). STS14's file was not in the stored copy we could read; 75.59 is the
# leaderboard value, so that one task is compared within 0.01 instead of by its rounded digits.
MTEB_MINILM_L6 = {"sts12": 72.37, "sts13": 80.60, "sts14": 75.59, "sts15": 85.39, "sts16": 78.99,
                  "stsb": 82.03, "sickr": 77.58}


# The published pair counts of each task (SemEval releases, Cer et al. 2017, Marelli et al. 2014, MTEB).
PUBLISHED_COUNTS = {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186, "stsb": 1379,
                    "sickr": 9927, "sickr-test": 4927}


@pytest.mark.parametrize("name", TASKS.names())
def test_every_task_metadata_and_counts(name, sts_data_dir):
    task = TASKS.get(name)
    assert task.citation and task.description and task.main_score == "cosine_spearman"
    pairs = task.load(sts_data_dir)
    assert len(pairs) == PUBLISHED_COUNTS[name] == task.n_pairs
    assert all(isinstance(s, float) for s in pairs.scores[:50])
    assert all(pairs.sentences1) and all(pairs.sentences2)


def test_senteval_preprocessing_tokenises_and_lowercases_sts_but_not_sick_case(sts_data_dir):
    raw = TASKS.get("stsb").load(sts_data_dir)
    senteval = TASKS.get("stsb").load(sts_data_dir, "senteval")
    assert senteval.scores == raw.scores and senteval.sentences1 != raw.sentences1
    assert all(s == s.lower() for s in senteval.sentences1[:200])
    assert any(" ." in s for s in senteval.sentences1[:50])  # Moses splits the full stop
    sick = TASKS.get("sickr-test").load(sts_data_dir, "senteval")
    assert any(c.isupper() for s in sick.sentences1[:50] for c in s)  # SICK keeps its case


def test_a_file_whose_last_line_has_no_newline_keeps_that_line(sts_data_dir, tmp_path):
    for name in ("STS.input.FNWN.txt", "STS.gs.FNWN.txt", "STS.input.OnWN.txt", "STS.gs.OnWN.txt",
                 "STS.input.headlines.txt", "STS.gs.headlines.txt"):
        text = (sts_data_dir / "sts13" / name).read_text(encoding="utf-8")
        (tmp_path / "sts13").mkdir(exist_ok=True)
        (tmp_path / "sts13" / name).write_text(text.rstrip("\n"), encoding="utf-8")  # no final newline
    assert len(TASKS.get("sts13").load(tmp_path)) == 1500


def test_hub_copies_round_trip_quotes_tabs_and_backslashes(tmp_path):
    import pandas as pd

    from dsgen.data.hub import hub_file, read_hub_task, write_hub_frame

    tricky = ['He said "hi"\tthen left.', "back\\slash and 'quote'", "plain"]
    frame = pd.DataFrame({"sentence1": tricky, "sentence2": list(reversed(tricky)), "score": [1.0, 2.5, 5.0]})
    write_hub_frame(hub_file(tmp_path, "sts12"), frame)
    pairs = read_hub_task(tmp_path, "sts12")
    assert pairs.sentences1 == tricky and pairs.sentences2 == list(reversed(tricky)) and pairs.scores == [1.0, 2.5, 5.0]


class MockEncoder:
    """Seeded mock: a sentence's vector depends only on its text; shares words -> closer vectors."""

    def __init__(self):
        self.calls = 0
        self.encoded = 0

    def encode(self, sentences, batch_size=32, convert_to_tensor=True, show_progress_bar=False):
        import torch

        self.calls += 1
        self.encoded += len(sentences)
        out = np.zeros((len(sentences), 64), dtype=np.float32)
        for i, s in enumerate(sentences):
            for w in s.lower().split():
                h = int(hashlib.md5(w.encode()).hexdigest(), 16)
                out[i, h % 64] += 1.0
        return torch.from_numpy(out)


def test_pipeline_with_mock_encoder(sts_data_dir, tmp_path):
    tasks = list(DEFAULT_TASKS)
    enc = MockEncoder()
    cached = StsEvaluator(tasks, sts_data_dir).evaluate(enc, "mock")
    assert enc.calls == 1
    naive_enc = MockEncoder()
    naive = StsEvaluator(tasks, sts_data_dir, dedup=False).evaluate(naive_enc, "mock")
    assert naive_enc.encoded > enc.encoded * 1.3  # sentences repeat across and within sets
    for t in tasks:
        assert cached.tasks[t].spearman == pytest.approx(naive.tasks[t].spearman, abs=1e-9)
        assert 0 < cached.tasks[t].spearman < 100  # word overlap correlates with similarity
    path = cached.save(tmp_path / "mock.json")
    again = Result.load(path)
    assert again.tasks == cached.tasks and again.average == cached.average
    assert again.to_dict()["schema_version"] == 1 and "torch" in again.versions


def test_tables_mark_best_per_column():
    a = Result("a", {"stsb": TaskScore(80.0, 80.0, 1), "sts12": TaskScore(60.0, 60.0, 1)})
    b = Result("b", {"stsb": TaskScore(70.0, 70.0, 1), "sts12": TaskScore(65.0, 65.0, 1)})
    frame = comparison_frame([a, b], ["sts12", "stsb"])
    assert list(frame.columns) == ["STS12", "STSb", "Avg."]
    assert frame.loc["a", "Avg."] == 70.0 and frame.loc["b", "Avg."] == 67.5
    md = to_markdown(frame)
    assert "**80.00**" in md and "**65.00**" in md and "**70.00**" in md and "| 70.00" in md
    assert to_rich(frame).row_count == 2


def test_unknown_task_did_you_mean():
    with pytest.raises(DsgenError, match="did you mean 'sts12'"):
        parse_tasks("sts12,stss12")
    assert parse_tasks("mteb") == list(MTEB_TASKS)
    proc = subprocess.run([sys.executable, "-m", "dsgen.cli", "eval", "minilm-l6", "--tasks", "stbs"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "did you mean 'stsb'" in proc.stderr and "Traceback" not in proc.stderr


def test_malformed_data_names_file_and_line(sts_data_dir, tmp_path):
    root = tmp_path / "sts"
    shutil.copytree(sts_data_dir / "sts13", root / "sts13")
    gold = root / "sts13" / "STS.gs.OnWN.txt"
    lines = gold.read_text().split("\n")
    lines[4] = "four-ish"
    gold.write_text("\n".join(lines))
    with pytest.raises(DsgenError, match=r"STS.gs.OnWN.txt:5: gold score 'four-ish'"):
        TASKS.get("sts13").load(root)
    with pytest.raises(DsgenError, match="does not exist"):
        StsEvaluator(["stsb"], tmp_path / "nowhere")
    with pytest.raises(DsgenError, match="expected 1379"):
        (root / "stsbenchmark").mkdir()
        (root / "stsbenchmark" / "sts-test.csv").write_text("g\tf\ty\t1\t2.0\ta\tb\n")
        TASKS.get("stsb").load(root)


def test_offline_without_data_is_a_one_line_error(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "DSGEN_CACHE_DIR": str(tmp_path), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "dsgen.cli", "eval", "minilm-l6", "--tasks", "stsb"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "DSGEN_DATA_DIR" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_minilm_reproduces_mteb_scores(sts_data_dir):
    from dsgen.encoders import load_encoder

    result = StsEvaluator(list(MTEB_TASKS), sts_data_dir).evaluate(load_encoder("minilm-l6", "cpu"), "minilm-l6")
    exact = {t: s.spearman for t, s in result.tasks.items()}
    got = {t: round(v, 2) for t, v in exact.items() if t != "sts14"}
    assert got == {t: v for t, v in MTEB_MINILM_L6.items() if t != "sts14"}, exact
    assert abs(exact["sts14"] - MTEB_MINILM_L6["sts14"]) <= 0.01, exact


def test_bfloat16_evaluation_is_close_and_leaves_the_model_float32(sts_data_dir, tiny_encoder_dir):
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    full = StsEvaluator(["sts16"], sts_data_dir).evaluate(model)
    half = StsEvaluator(["sts16"], sts_data_dir, dtype="bfloat16").evaluate(model)
    assert next(model.parameters()).dtype == torch.float32
    assert half.tasks["sts16"].spearman == pytest.approx(full.tasks["sts16"].spearman, abs=1.0)
    assert half.tasks["sts16"].spearman != full.tasks["sts16"].spearman  # it did encode in bfloat16
    with pytest.raises(DsgenError, match="unknown dtype"):
        StsEvaluator(["sts16"], sts_data_dir, dtype="float8")
