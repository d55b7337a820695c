"""The labelling stage: an LM judge's expected 0-5 score as the label, read from the next-token
distribution (batch-invariant, cached), and the stage in plans and runs."""

from dataclasses import replace

import numpy as np
import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling import LABELLERS, LabelContext
from dsgen.labelling.lm_judge import LmJudge, LmJudgeConfig

PAIRS = [Pair("A man plays a guitar.", "A man is playing a guitar.", 1.0),
         Pair("A man plays a guitar.", "The stock market fell.", 0.0),
         Pair("A dog runs.", "A dog is running fast in the park today.", 0.5)]


def judge(**kw):
    return LmJudge(LmJudgeConfig(**{"chat": False, **kw}))


def test_the_judge_labels_pairs_with_the_expected_digit_over_five(tiny_lm):
    from dsgen.generation.judge import option_probabilities

    ctx = LabelContext(load_generator=lambda: tiny_lm, progress=False)
    out, summary = judge().apply(PAIRS, ctx)
    cfg = LmJudgeConfig(chat=False)
    prompts = [cfg.prompt.format(x1=p.text_a, x2=p.text_b) + cfg.answer_prefix for p in PAIRS]
    probs = option_probabilities(tiny_lm, prompts, [(str(d), f" {d}") for d in range(6)])
    expected = probs @ np.arange(6) / 5
    assert [p.label for p in out] == pytest.approx(expected.round(6).tolist(), abs=1e-6)
    assert all(0 <= p.label <= 1 for p in out) and [p.extra["generated_label"] for p in out] == [1.0, 0.0, 0.5]
    assert summary["labeller"] == "lm-judge" and summary["n"] == 3 and summary["replaced_labels"]
    kept, _ = judge(replace_label=False).apply(PAIRS, ctx)  # MultiCSR: a rating beside the generated label
    assert [p.label for p in kept] == [1.0, 0.0, 0.5] and [p.extra["judge_score"] for p in kept] == [p.label for p in out]


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


def test_the_stage_runs_between_postprocessing_and_reweighting(tiny_lm_dir, tiny_encoder_dir, sts_data_dir, tmp_path):
    """A method with a labeller: planned (shown with its settings), keyed (a changed prompt is a new run),
    applied to training and validation pairs, recorded in the result."""
    from dsgen.method import METHODS
    from dsgen.methods.dino import dino_recipe
    from dsgen.planning import plan_run
    from dsgen.presets import Preset
    from dsgen.runner import Runner
    from tests.mock_components import register_mock_components

    register_mock_components()
    if "mock-labelled" not in METHODS:
        METHODS.add("mock-labelled", dino_recipe(description="mock + LM judge", generator="mock-test",
                                                 labeller="lm-judge", labeller_config={"model": str(tiny_lm_dir),
                                                                                       "chat": False}))
    inputs = tmp_path / "x1.txt"
    inputs.write_text("\n".join(f"A man number {i} plays a red guitar on the street." for i in range(12)))
    preset = Preset(name="unit", seeds=[1], data_seed=42, inputs=str(inputs), tasks=["sts16"], max_inputs=12,
                    generation={"device": "cpu", "per_label": 1},
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu"},
                    labelling={"batch_size": 4, "device": "cpu"})
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
