"""The judge's written score (issue 32): CLAIF's 0.0-1.0 prompt verbatim and its first-number parse, MultiCSR's
whole-answer parse, CLAIF's two pairs per (input, score), and MultiCSR's curation on the written scores."""

import pytest

from dsgen.data.pairs import Pair
from dsgen.labelling import LabelContext
from dsgen.labelling import lm_judge
from dsgen.labelling.lm_judge import CLAIF_PROMPT, LmJudge, LmJudgeConfig, greedy_answers, written_score

# xiami2019/CLAIF@34f0dce:modeling.py#L197-L200, with '{}' as {x1} / {x2}
CLAIF_REPOSITORY = ("The similarity score for two sentences is in the range from 0.0 to 1.0, 0.0 means completely "
                    "different and 1.0 means almost the same.\nNow give two sentences '{}' and  '{}', please give a "
                    "similarity score of these two sentences and give the reason:\nThe similarity score for these two "
                    "sentences is")


def test_claifs_prompt_is_its_repositorys_on_its_0_to_1_scale():
    assert CLAIF_PROMPT.replace("{x1}", "{}").replace("{x2}", "{}") == CLAIF_REPOSITORY


@pytest.mark.parametrize("text, first, exact", [
    (" 0.8. The two sentences mean the same.", 0.8, None),   # CLAIF's answers: the first number
    (" 4.5", 4.5, 4.5), ("3", 3.0, 3.0), (" 5.0\n", 5.0, 5.0),  # MultiCSR's: the answer is the number
    (" 0.00015556", 0.00015556, None),                       # a number, but not one of MultiCSR's form
    (" 4.5 because", 4.5, None), ("I would say 4", 4.0, None), ("6", None, None), (" 7.5", None, None),
    (" none", None, None), ("1.2.3", None, None)])
def test_written_scores_are_parsed_as_each_paper_parses_them(text, first, exact):
    assert written_score(text, 5, "first") == first
    assert written_score(text, 5, "exact") == exact


class Scripted:
    """What a judge model writes for each prompt (stands in for :func:`greedy_answers`)."""

    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def __call__(self, lm, prompts, max_new_tokens, batch_size):
        self.asked += prompts
        return [self.answers[p.split("'")[3]] for p in prompts]  # keyed by x2


def test_claifs_label_is_the_first_number_it_writes_smoothed_and_two_pairs_per_input_and_score(tiny_lm, monkeypatch):
    """CLAIF: the score its judge writes (0.0-1.0), smoothed as 0.8 * score + 0.1, at most two pairs per (input,
    score) in generation order (postprocess_dataset.py#L40-L44), random pairs kept at 0 and never capped."""
    answers = {"r1": " 0.8. They are close.", "r2": " 0.8.", "r3": " 0.8, because", "r4": " 0.2.", "r5": " no idea",
               "x": " 0.8."}
    script = Scripted(answers)
    monkeypatch.setattr(lm_judge, "greedy_answers", script)
    pairs = [Pair("s", f"r{i}", round(0.1 * i, 1)) for i in range(1, 6)]
    pairs += [Pair("s", "x", 0.0, extra={"source": "random"})]
    judge = LmJudge(LmJudgeConfig(model="generator", prompt=CLAIF_PROMPT, read="written", max_score=1,
                                  label_smoothing=0.2, judge_random_pairs=False, max_per_x1_score=2,
                                  max_abstention_share=0.5))
    out, summary = judge.apply(pairs, LabelContext(load_generator=lambda: tiny_lm, progress=False))
    assert [p.extra["judge_score"] for p in out] == [0.8, 0.8, 0.8, 0.2, None, 0.8]
    assert [p.label for p in out] == pytest.approx([0.74, 0.74, 0.74, 0.26, None, 0.0])
    assert [p.weight for p in out] == [None, None, 0.0, None, 0.0, None]  # third 0.8 capped, no score dropped
    assert summary["dropped_max_per_x1_score"] == 1 and summary["abstained"] == 1 and summary["read"] == "written"
    assert all(p.startswith(CLAIF_PROMPT.split("{x1}")[0]) for p in script.asked)


def test_the_judges_answer_is_its_greedy_first_line(tiny_lm):
    """Decoded by the core without debiasing at top-k 1: the same answer in any batch, cut at its first line."""
    prompts = [CLAIF_PROMPT.format(x1=f"A man plays {i}.", x2="A man plays.") for i in range(5)]
    alone = [greedy_answers(tiny_lm, [p], 12, 8)[0] for p in prompts[:2]]
    together = greedy_answers(tiny_lm, prompts, 12, 3)
    assert together[:2] == alone and all("\n" not in a for a in together)
    assert all(len(tiny_lm.tokenizer.encode(a, add_special_tokens=False)) <= 12 for a in together)


def test_multicsr_curates_on_the_scores_its_judge_writes(tiny_lm, monkeypatch):
    """MultiCSR (flan_filter.py#L155-L173, filter 15): a triplet stays when its judge wrote bare numbers, the positive
    at least 3, the negative at most 3, and the two differ; the expected digit kept 0 of 85 pairs on cpu."""
    from dsgen.method import get_method
    from dsgen.reweighting.base import ReweightContext
    from dsgen.reweighting.curation import CurationConfig, SelfCuration

    labeller_config = get_method("multicsr").labeller_config
    assert labeller_config["read"] == "written" and labeller_config["parse"] == "exact"
    answers = {"e1": " 4.0", "c1": " 1.5", "e2": " 3.0", "c2": " 3.0", "e3": " 5.0", "c3": " 0.00015556",
               "e4": " 3", "c4": " 2.5"}
    monkeypatch.setattr(lm_judge, "greedy_answers", Scripted(answers))
    rating = LmJudgeConfig(**{**labeller_config, "model": "generator", "prompt": "'{x1}' '{x2}'"})
    pairs = [Pair(f"s{i}", f"{side}{i}", "entailment" if side == "e" else "contradiction")
             for i in range(1, 5) for side in "ec"]
    rated, summary = LmJudge(rating).apply(pairs, LabelContext(load_generator=lambda: tiny_lm, progress=False))
    assert [p.extra["judge_score"] for p in rated] == [0.8, 0.3, 0.6, 0.6, 1.0, None, 0.6, 0.5]
    assert summary["abstained"] == 1 and [p.label for p in rated] == [p.label for p in pairs]
    curation = SelfCuration(CurationConfig(max_abstention_share=0.5))
    weights = curation.score(rated, ReweightContext(seed=1)).weights
    assert weights == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]  # 3 vs 3: no gap; an unscored side: dropped
