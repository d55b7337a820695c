import hashlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from dsgen.errors import DsgenError
from dsgen.evaluation.evaluator import StsEvaluator
from dsgen.evaluation.results import Result, TaskScore
from dsgen.reports.tables import comparison_frame, to_markdown, to_rich
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
    from tests.cli_process import run_dsgen

    proc = run_dsgen(["eval", "minilm-l6", "--tasks", "stbs"])
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
def test_minilm_reproduces_mteb_scores(minilm_mteb_result):
    """``dsgen eval minilm-l6 --tasks mteb`` gives MTEB's published all-MiniLM-L6-v2 numbers to the digit."""
    from dsgen.evaluation.results import Result

    result = Result.load(minilm_mteb_result)
    assert sorted(result.tasks) == sorted(MTEB_TASKS)
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


# -- the evaluator's encoding: tokenised once per tokenizer, the module pipeline called on the batches ------------


class EncodeOnly:
    """The reference path: a sentence-transformers model reached only through ``encode`` (and its tokenizer,
    for the batches), as the evaluator encoded every batch before the token cache (88cfe5f)."""

    def __init__(self, model):
        self.model, self.tokenizer, self.max_seq_length = model, model.tokenizer, model.max_seq_length

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def to(self, dtype):
        return EncodeOnly(self.model.to(dtype))


def raw_lm_encoder(tiny_lm_dir, sts_data_dir):
    """The cpu preset's kind of encoder on a tiny random Llama: its first layers, mean pooled, standardised."""
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    with using_data_dir(sts_data_dir):
        return load_encoder(f"lm:{tiny_lm_dir}?layers=2&pooling=mean&token_norm=1&standardize=1", "cpu")


def assert_same_scores(got, ref, dtype):
    tol = 1e-6 if dtype == "float32" else 0.02  # bfloat16 keeps 3 significant digits
    for task, score in ref.tasks.items():
        for field in ("spearman", "pearson", "euclidean_spearman", "manhattan_spearman"):
            assert getattr(got.tasks[task], field) == pytest.approx(getattr(score, field), abs=tol), (task, field)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["raw-lm", "bert"])
def test_pretokenised_batches_score_as_encode_does(kind, dtype, tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    """The evaluator feeds cached, pre-tokenised batches to the module pipeline; every task's scores equal
    those of ``encode`` on the same batches (the reference path) to the dtype's precision, and the naive
    per-task loop's to batch-shape rounding."""
    from sentence_transformers import SentenceTransformer

    model = raw_lm_encoder(tiny_lm_dir, sts_data_dir) if kind == "raw-lm" else SentenceTransformer(str(tiny_encoder_dir), device="cpu")
    tasks = ["sts16", "stsb"]
    got = StsEvaluator(tasks, sts_data_dir, dtype=dtype).evaluate(model)
    assert_same_scores(got, StsEvaluator(tasks, sts_data_dir, dtype=dtype).evaluate(EncodeOnly(model)), dtype)
    naive = StsEvaluator(tasks, sts_data_dir, dtype=dtype, dedup=False).evaluate(model)
    for task in tasks:
        assert got.tasks[task].spearman == pytest.approx(naive.tasks[task].spearman, abs=1e-3 if dtype == "float32" else 0.05)


def test_every_run_of_a_comparison_tokenises_the_test_sets_once(tiny_lm_dir, sts_data_dir):
    """A comparison evaluates freshly trained copies of one encoder: only the first is tokenised (the
    later ones, in float32 or as bfloat16 copies, never call the tokenizer), the cached batches are
    left as they were, and each copy's scores are its own (its reference path's), not the first's.
    An encoder that tokenises otherwise (a shorter maximum length) is a new key."""
    from unittest import mock

    import torch

    from dsgen.benchmarks.evaluation import retrained_copy
    from dsgen.evaluation.evaluator import _TOKENS, token_plan

    _TOKENS.clear()  # the process-wide cache holds earlier tests' plans (and drops the oldest at its size)
    first = raw_lm_encoder(tiny_lm_dir, sts_data_dir)
    tasks = ["sts16"]
    ev, half = StsEvaluator(tasks, sts_data_dir), StsEvaluator(tasks, sts_data_dir, dtype="bfloat16")
    first_scores = ev.evaluate(first)
    plan = token_plan(first, ev.distinct_sentences())
    snapshot = [{k: v.clone() for k, v in f.items() if isinstance(v, torch.Tensor)} for f in plan.features]

    def no_tokenising(*args, **kwargs):
        raise AssertionError("tokenised again")

    for seed in (1, 2):
        later = retrained_copy(first, seed, scale=0.05)
        reference = StsEvaluator(tasks, sts_data_dir).evaluate(EncodeOnly(later))
        later.preprocess = no_tokenising
        with mock.patch.object(type(later.tokenizer), "__call__", no_tokenising):
            got = ev.evaluate(later)
            half.evaluate(later)  # the bfloat16 copy has the same tokenizer: the same batches
        assert_same_scores(got, reference, "float32")
        assert got.tasks["sts16"].spearman != pytest.approx(first_scores.tasks["sts16"].spearman, abs=1e-4)
    assert token_plan(first, ev.distinct_sentences()) is plan
    for cached, before in zip(plan.features, snapshot):
        assert all(torch.equal(cached[k], v) for k, v in before.items())
    shorter = retrained_copy(first, 3, scale=0.05)
    shorter.max_seq_length = 8
    keys = len(_TOKENS)
    cut = ev.evaluate(shorter)
    assert len(_TOKENS) == keys + 1 and token_plan(shorter, ev.distinct_sentences()) is not plan
    assert_same_scores(cut, StsEvaluator(tasks, sts_data_dir).evaluate(EncodeOnly(shorter)), "float32")


def test_batches_run_side_by_side_one_thread_each_and_the_thread_count_is_restored(tiny_lm_dir, sts_data_dir):
    """On a CPU the batches run one per intra-op thread, each op single-threaded (an op split across
    threads waits for the slowest at every step, which on a shared 2-core CPU made the bfloat16 encoding
    4x slower); the process's thread count is restored, and the embeddings equal one batch at a time."""
    import torch

    from dsgen.evaluation.evaluator import encode_features, token_plan

    model = raw_lm_encoder(tiny_lm_dir, sts_data_dir)
    seen = []
    model[0].register_forward_hook(lambda *args: seen.append(torch.get_num_threads()))
    plan = token_plan(model, StsEvaluator(["sts16"], sts_data_dir).distinct_sentences(), token_budget=256)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        side_by_side = encode_features(model, plan.features)
        assert torch.get_num_threads() == 2 and seen and set(seen) == {1}
        torch.set_num_threads(1)
        one_at_a_time = encode_features(model, plan.features)
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(side_by_side, one_at_a_time))


def test_an_encoder_with_a_tokenizer_but_no_pipeline_is_encoded_per_batch(sts_data_dir):
    """An object with ``encode`` and a tokenizer but no module pipeline gets the length buckets through ``encode``."""
    from transformers import AutoTokenizer

    from dsgen.models import encoder_path

    enc = MockEncoder()
    enc.tokenizer, enc.max_seq_length = AutoTokenizer.from_pretrained(encoder_path("minilm-l6")), 128
    got = StsEvaluator(["sts16"], sts_data_dir, token_budget=1024).evaluate(enc)
    assert enc.calls > 1
    ref = StsEvaluator(["sts16"], sts_data_dir).evaluate(MockEncoder())
    assert got.tasks["sts16"].spearman == pytest.approx(ref.tasks["sts16"].spearman, abs=1e-9)


@pytest.mark.slow
def test_smollm2_l4_scores_as_encode_does(sts_data_dir):
    """The cpu preset's encoder (evaluated in float32, the preset's eval_dtype): the evaluator's scores equal
    ``encode`` on the same batches (the path before the token cache), on STS16. The bfloat16 path and the other
    tasks add time, not coverage: test_pretokenised_batches_score_as_encode_does checks them on a causal LM of the
    same kind (raw-lm-bfloat16)."""
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    dtype = "float32"
    with using_data_dir(sts_data_dir):
        model = load_encoder("smollm2-l4", "cpu")
    tasks = ["sts16"]
    got = StsEvaluator(tasks, sts_data_dir, dtype=dtype).evaluate(model)
    assert_same_scores(got, StsEvaluator(tasks, sts_data_dir, dtype=dtype).evaluate(EncodeOnly(model)), dtype)
