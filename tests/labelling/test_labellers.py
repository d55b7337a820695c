"""The labelling stage: an LM judge's expected 0-5 score as the label, read from the next-token
distribution (batch-invariant, cached), and the stage in plans and runs."""

from dataclasses import replace

import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling import LABELLERS, LabelContext, LabelReport
from dsgen.labelling.lm_judge import LmJudge, LmJudgeConfig

PAIRS = [Pair("A man plays a guitar.", "A man is playing a guitar.", 1.0),
         Pair("A man plays a guitar.", "The stock market fell.", 0.0),
         Pair("A dog runs.", "A dog is running fast in the park today.", 0.5)]


def judge(**kw):
    return LmJudge(LmJudgeConfig(**{"chat": False, **kw}))


def expected_digit_by_hand(lm, prompt):
    """E[digit] / 5 computed apart from dsgen's judge: one unpadded forward of the prompt and the space the
    character tokenizer writes before a digit (" 4" is " " + "4"), a softmax over the whole vocabulary, the
    six digit tokens' probabilities renormalised."""
    import torch

    tok = lm.tokenizer
    ids = tok(prompt + " ", return_tensors="pt", add_special_tokens=True)
    assert ids["input_ids"].shape[0] == 1 and tok.convert_ids_to_tokens(ids["input_ids"][0, -1].item()) == " "
    with torch.inference_mode():
        probs = torch.softmax(lm.model(**ids).logits[0, -1].double(), dim=-1)
    digit_ids = [tok.convert_tokens_to_ids(str(d)) for d in range(6)]
    p = probs[digit_ids] / probs[digit_ids].sum()
    return float((p * torch.arange(6, dtype=torch.float64)).sum() / 5)


def test_the_judge_labels_pairs_with_the_expected_digit_over_five(tiny_lm):
    ctx = LabelContext(load_generator=lambda: tiny_lm, progress=False)
    out, summary = judge().apply(PAIRS, ctx)
    cfg = LmJudgeConfig(chat=False)
    expected = [expected_digit_by_hand(tiny_lm, cfg.prompt.format(x1=p.text_a, x2=p.text_b)) for p in PAIRS]
    assert [p.label for p in out] == pytest.approx(expected, abs=2e-6)
    assert len({round(x, 5) for x in expected}) == 3  # pairs apart by ~1e-4 (a random model), 50 times the tolerance
    assert all(0 <= p.label <= 1 for p in out) and [p.extra["generated_label"] for p in out] == [1.0, 0.0, 0.5]
    assert summary["labeller"] == "lm-judge" and summary["n"] == 3 and summary["replaced_labels"]
    kept, _ = judge(replace_label=False).apply(PAIRS, ctx)  # MultiCSR: a rating beside the generated label
    assert [p.label for p in kept] == [1.0, 0.0, 0.5] and [p.extra["judge_score"] for p in kept] == [p.label for p in out]


class ScriptedJudge(LmJudge):
    """The LM judge's labelling of scores given in advance, None where the judge abstains (an API judge whose
    answer opens with no digit)."""

    def __init__(self, scores, **config):
        super().__init__(LmJudgeConfig(**{"chat": False, **config}))
        self.scripted = scores

    def score(self, pairs, context):
        return LabelReport(list(self.scripted))


def masked_pairs(n=20):
    """CLAIF-like pairs: the generated label is the masking rate (0.0 to 0.8: the higher, the less similar),
    the last pair one of DINO's random pairs (label 0)."""
    pairs = [Pair(f"Sentence {i}.", f"Rewrite {i}.", round(0.1 * (i % 9), 1)) for i in range(n - 1)]
    return pairs + [Pair("Sentence 0.", "Something else.", 0.0, extra={"source": "random"})]


def test_an_abstained_pair_loses_its_generated_label_and_is_dropped():
    """A judge's missing score is no label: the pair keeps nothing that means something else (CLAIF's mask
    rate), its weight is 0 so training never sees it, and the summary counts the abstentions; a random pair
    that keeps its 0 whatever the judge says (judge_random_pairs = false) stays."""
    from dsgen.training.base import weighted

    pairs = masked_pairs()
    scores = [0.2 + 0.03 * i for i in range(20)]
    scores[7] = scores[19] = None  # 2 of 20: a tenth, the default's limit
    claif = {"label_smoothing": 0.2, "judge_random_pairs": False}
    out, summary = ScriptedJudge(scores, **claif).apply(pairs, LabelContext(progress=False))
    assert pairs[7].label == 0.7 and out[7].label is None and out[7].weight == 0.0
    assert out[7].extra["generated_label"] == 0.7 and out[7].extra["judge_score"] is None
    assert out[19].label == 0.0 and out[19].weight is None  # the random pair: its 0 stands
    assert [p.label for i, p in enumerate(out) if i not in (7, 19)] == \
        pytest.approx([0.8 * x + 0.1 for i, x in enumerate(scores) if i not in (7, 19)])
    assert summary["abstained"] == 2 and summary["abstained_share"] == 0.1 and summary["dropped_unlabelled"] == 1
    assert [p for p, _ in weighted(out)] == [p for i, p in enumerate(out) if i != 7]
    kept, summary = ScriptedJudge(scores, replace_label=False).apply(pairs, LabelContext(progress=False))
    assert [p.label for p in kept] == [p.label for p in pairs] and summary["abstained"] == 2  # a later stage decides


def test_a_run_fails_when_more_than_the_stated_share_of_pairs_abstain():
    """A labeller that abstains on every pair is refused with one line (CLAIF's labels would keep the mask
    rates); more than max_abstention_share (default 0.1) abstaining too; the share is a setting."""
    from dsgen.labelling import MAX_ABSTENTION_SHARE

    assert LmJudgeConfig().max_abstention_share == MAX_ABSTENTION_SHARE == 0.1
    pairs = masked_pairs()
    for replace_label in (True, False):
        with pytest.raises(DsgenError, match=r"gave no score for 20 of 20 pairs \(100%\)") as err:
            ScriptedJudge([None] * 20, replace_label=replace_label).apply(pairs, LabelContext(progress=False))
        assert "\n" not in str(err.value) and "[labelling] max_abstention_share = 0.1" in str(err.value)
    three = [None, None, None] + [0.5] * 17
    with pytest.raises(DsgenError, match="3 of 20 pairs"):
        ScriptedJudge(three).apply(pairs, LabelContext(progress=False))
    out, summary = ScriptedJudge(three, max_abstention_share=0.15).apply(pairs, LabelContext(progress=False))
    assert summary["abstained"] == 3 and [p.weight for p in out[:3]] == [0.0] * 3
    with pytest.raises(DsgenError, match=r"max_abstention_share must be in \[0, 1\]"):
        LmJudgeConfig(max_abstention_share=1.5)


def test_a_run_whose_judge_abstains_on_every_pair_is_a_failed_run(tiny_lm_dir, tiny_encoder_dir, sts_data_dir,
                                                                  tmp_path):
    """Through the runner: the labeller's one-line error fails the run (RunFailed, a .failed.json beside where
    its result would be), before any training."""
    import json

    from dsgen.planning import plan_run
    from dsgen.runs.pipeline import Runner
    from dsgen.runs.records import RunFailed

    plan = plan_run("mock-labelled", labelled_preset(tiny_lm_dir, tiny_encoder_dir, tmp_path), 1)

    class Silent(ScriptedJudge):
        def score(self, pairs, context):
            return LabelReport([None] * len(pairs))

    plan.labeller = Silent([], **plan.labeller.config.to_dict())
    runner = Runner(tmp_path / "runs", str(sts_data_dir), progress=False)
    with pytest.raises(RunFailed, match=r"no score for (\d+) of \1 pairs \(100%\)") as err:
        runner.run(plan)
    assert "\n" not in str(err.value) and "training" not in err.value.extra
    failed = json.loads(runner.result_path(plan).with_suffix(".failed.json").read_text())
    assert "max_abstention_share" in failed["reason"]


def test_labellers_and_reweighters_share_one_stage_contract():
    """What the planner asks of a labeller or reweighter (the models it loads, whether it judges with the
    generator LM) is written once, in the stage base both derive from, with the same defaults as before."""
    from dsgen.component import PairStage
    from dsgen.labelling.base import Labeller
    from dsgen.reweighting.base import Reweighter
    from dsgen.reweighting.random_weights import RandomReweighter

    for base in (Labeller, Reweighter):
        assert issubclass(base, PairStage) and "models" not in vars(base) and "needs_generator_lm" not in vars(base)
    assert RandomReweighter().models(None) == [] and RandomReweighter().needs_generator_lm() is False
    assert ScriptedJudge([]).models(None) == [] and ScriptedJudge([]).needs_generator_lm() is True  # lm-judge's own
    assert ScriptedJudge([], model="x").models(None) == ["x"] and not ScriptedJudge([], model="x").needs_generator_lm()
    from dsgen.planning import Overrides, plan_run
    from dsgen.presets import load_preset

    api = Overrides(generator="openai:m", base_url="http://127.0.0.1:1/v1")  # the planner reads the contract
    with pytest.raises(DsgenError, match="labeller lm-judge judge with the run's generator LM, which is an API"):
        plan_run("claif", load_preset("smoke"), 1, api)


def test_a_pairs_score_does_not_depend_on_its_batch(tiny_lm):
    from dsgen.generation.judge import SCORES

    SCORES.entries.clear()
    ctx = LabelContext(load_generator=lambda: tiny_lm, progress=False)
    alone = judge(batch_size=1).score(PAIRS[2:], ctx).scores
    SCORES.entries.clear()
    together = judge(batch_size=8).score(PAIRS, ctx).scores
    assert alone[0] == together[2]
    before = len(SCORES.entries)
    assert judge(batch_size=8).score(PAIRS, ctx).scores == together and len(SCORES.entries) == before  # cached


def test_a_chat_judge_needs_a_chat_template_and_a_judge_needs_a_model(tiny_lm):
    with pytest.raises(DsgenError, match="no chat template"):
        LmJudge(LmJudgeConfig(chat=True)).score(PAIRS, LabelContext(load_generator=lambda: tiny_lm, progress=False))
    with pytest.raises(DsgenError, match="has none"):
        judge().score(PAIRS, LabelContext(progress=False))
    with pytest.raises(DsgenError, match=r"\{x1\} and \{x2\}"):
        LmJudgeConfig(prompt="no placeholders")


def labelled_preset(tiny_lm_dir, tiny_encoder_dir, tmp_path):
    """The preset of the runner's labelling tests, and the method ``mock-labelled`` (mock pairs, the LM judge)."""
    from dsgen.method import METHODS
    from dsgen.methods.dino import dino_recipe
    from dsgen.presets import Preset
    from tests.mock_components import register_mock_components

    register_mock_components()
    if "mock-labelled" not in METHODS:
        METHODS.add("mock-labelled", dino_recipe(description="mock + LM judge", generator="mock-test",
                                                 labeller="lm-judge", labeller_config={"model": str(tiny_lm_dir),
                                                                                       "chat": False}))
    inputs = tmp_path / "x1.txt"
    inputs.write_text("\n".join(f"A man number {i} plays a red guitar on the street." for i in range(12)))
    return Preset(name="unit", seeds=[1], data_seed=42, inputs=str(inputs), tasks=["sts16"], max_inputs=12,
                  generation={"device": "cpu", "per_label": 1},
                  training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu", "epochs": 3.0},
                  labelling={"batch_size": 4, "device": "cpu"})  # 3 epochs: enough steps to count as trained


def test_the_stage_runs_between_postprocessing_and_reweighting(tiny_lm_dir, tiny_encoder_dir, sts_data_dir, tmp_path):
    """A method with a labeller: planned (shown with its settings), keyed (a changed prompt is a new run),
    applied to training and validation pairs, recorded in the result."""
    from dsgen.planning import plan_run
    from dsgen.runs.pipeline import Runner

    preset = labelled_preset(tiny_lm_dir, tiny_encoder_dir, tmp_path)
    plan = plan_run("mock-labelled", preset, 1)
    assert plan.labeller.name == "lm-judge" and plan.sections()["labeller"]["batch_size"] == 4
    assert plan.origins["labeller"]["batch_size"] == "preset" and plan.origins["labeller"]["model"] == "method"
    assert str(tiny_lm_dir) in plan.models()
    runner = Runner(tmp_path / "runs", str(sts_data_dir), progress=False)
    other = replace(preset, labelling={**preset.labelling, "prompt": "Rate {x1} against {x2} from 0 to 5."})
    assert runner.run_key(plan) != runner.run_key(plan_run("mock-labelled", other, 1))
    result = runner.run(plan)
    info = result.extra["labelling"]
    assert info["labeller"] == "lm-judge" and info["n"] == result.extra["train_pairs"] and "label_seconds" in result.timings
    from dsgen.data.pairs import read_pairs

    train = read_pairs(runner.result_path(plan).with_suffix(".train.jsonl"))
    assert all("judge_score" in p.extra and p.label == p.extra["judge_score"] for p in train)
    assert info["abstained"] == 0 and info["abstained_share"] == 0.0  # the local judge always gives a score
    validation = read_pairs(runner.result_path(plan).with_suffix(".validation.jsonl"))
    assert validation and all("judge_score" in p.extra for p in validation)
    assert "lm-judge" in LABELLERS


def test_the_api_judge_reads_the_servers_first_token_logprobs(tmp_path):
    """The same judgement through an OpenAI-compatible endpoint (a scripted one on 127.0.0.1): the expected
    digit from the answer's top log-probabilities, every request cached (a rerun asks nothing), and a server
    that returns none is a one-line error."""
    import math

    from dsgen.labelling.api_judge import ApiJudge, ApiJudgeConfig
    from tests.generation.fake_openai_server import FakeOpenAIServer, digit_logprobs

    for chat in (False, True):
        with FakeOpenAIServer() as srv:
            judge_ = ApiJudge(ApiJudgeConfig(model="m", base_url=srv.url, chat=chat, max_retries=0))
            ctx = LabelContext(progress=False, cache=tmp_path / f"cache-{chat}")
            out, summary = judge_.apply(PAIRS, ctx)
            cfg = judge_.config
            prompt = cfg.prompt.format(x1=PAIRS[0].text_a, x2=PAIRS[0].text_b)
            what = [{"role": "user", "content": prompt}] if chat else prompt + cfg.answer_prefix
            top = digit_logprobs(what)
            digits = {int(t): math.exp(v) for t, v in top.items() if t.strip().isdigit()}
            expected = sum(d * p for d, p in digits.items()) / sum(digits.values()) / 5
            assert out[0].label == pytest.approx(expected, abs=1e-6) and summary["requests_made"] == 3
            again, summary = judge_.apply(PAIRS, ctx)
            assert [p.label for p in again] == [p.label for p in out] and summary["requests_made"] == 0
    with FakeOpenAIServer(logprobs=False) as srv:
        with pytest.raises(DsgenError, match="returned no log-probabilities"):
            ApiJudge(ApiJudgeConfig(model="m", base_url=srv.url, max_retries=0)).apply(
                PAIRS, LabelContext(progress=False, cache=tmp_path / "none"))


def test_a_digit_is_read_where_the_model_writes_it():
    """SmolLM2's tokenizer spells " 4" as " " + "4": the judge must read the digit after that space, not an
    unspaced digit right after the prompt's last word (a character tokenizer here does the same)."""
    from dsgen.generation.judge import answer_lead
    from tests.conftest import build_char_tokenizer

    tok = build_char_tokenizer()
    assert answer_lead(tok, [(str(d), f" {d}") for d in range(6)]) == " "
    assert answer_lead(tok, [("true",), ("false",)]) == ""
