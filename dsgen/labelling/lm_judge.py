"""An LM as a similarity judge: a score for each pair, read where the judge's answer writes it or from the
probabilities of the digits there.

The judge fills a scoring prompt with the pair and reads its answer in one of two ways (``read``):

- ``written`` (CLAIF's and MultiCSR's): the judge writes its answer greedily, and the number it writes is the
  score, parsed as the paper parses it (``parse``): CLAIF takes the first number anywhere in the answer
  (``xiami2019/CLAIF@34f0dce:modeling.py#L225-L237``, ``re.findall(r'[0-9\\.]*[0-9]')[0]``); MultiCSR takes an answer
  that is only a number, one digit 0-5 or ``d.d`` (``Circle-Ming/MultiCSR@596898f:flan_filter.py#L155-L156``,
  ``flan_generate_scoring.py#L136-L137``). An answer without such a number, or with one beyond ``max_score``, gives
  no score (the judge abstains; both papers drop such answers). The answer is decoded by the debiased core without
  debiasing (top-k 1: greedy) up to ``answer_tokens`` tokens, and read up to its first line break or end of text.
  Greedy: CLAIF samples its scores at the generator's temperature 0.7 and top-p 0.9 (``modeling.py#L162-L164`` with
  ``data_generation.py#L21``, ``#L39``), so that one pair's score would depend on what else is sampled with it;
  the greedy answer is the judge's most likely one, as the ``api-judge`` asks for it (temperature 0) and as
  MultiCSR's ``generate`` decodes (its default, greedy).
- ``expected``: the next-token probabilities of the digits ``0`` ... ``max_score`` (each with and without a leading
  space) where the answer begins give the expected digit. Exact, deterministic and batch-invariant like the
  zero-shot discriminator (:mod:`dsgen.generation.judge`), but a continuous score, which no paper's judge gives.

The label is the score divided by ``max_score``, so in [0, 1] like DINO's labels. A chat model gets the prompt as a
user turn through its chat template, the assistant's answer opened with ``answer_prefix``. ``model = "generator"``
judges with the run's generator LM (CLAIF and MultiCSR ask the LLM that generated the pairs); any causal LM name
gives a separate judge. Scores are cached per (model, prompt, reading, pair) for the process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dsgen.config import Config
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling.base import (LABELLERS, MAX_ABSTENTION_SHARE, LabelContext, Labeller, LabelReport,
                                   check_abstention_share)

# CLAIF's scoring prompt, verbatim (xiami2019/CLAIF@34f0dce:modeling.py#L197-L200, the double space included): a
# score from 0.0 to 1.0, written at the start of an answer that goes on with its reason.
CLAIF_PROMPT = ("The similarity score for two sentences is in the range from 0.0 to 1.0, 0.0 means completely different "
                "and 1.0 means almost the same.\nNow give two sentences '{x1}' and  '{x2}', please give a similarity "
                "score of these two sentences and give the reason:\nThe similarity score for these two sentences is")
# The same words on a 0-5 scale, for the ``expected`` reading (one digit cannot say 0.0-1.0): the judge's default.
DIGIT_PROMPT = ("The similarity score for two sentences is in the range from 0 to 5, 0 means completely different and 5 "
                "means almost the same.\nNow give two sentences '{x1}' and  '{x2}', please give a similarity score of "
                "these two sentences and give the reason:\nThe similarity score for these two sentences is")
READS = ("expected", "written")
PARSES = ("first", "exact")
NUMBER = re.compile(r"[0-9\.]*[0-9]")  # CLAIF's (modeling.py#L225): the first match is the score


def written_score(text: str, max_score: float, parse: str = "first") -> float | None:
    """The score an answer writes, parsed as a paper parses it, or None (no score): ``first``: CLAIF's first number of
    the answer (``modeling.py#L225-L237``); ``exact``: MultiCSR's, the stripped answer is the number, a digit 0-5 or
    ``d.d`` (``flan_filter.py#L155-L156``). None too when the number lies beyond 0 to ``max_score`` or is not one
    (``1.2.3``)."""
    text = text.strip()
    if parse == "exact":
        ok = (len(text) == 3 and "." in text and text[0] in "012345" and text[-1] in "0123456789") or \
             (len(text) == 1 and text in "012345")
        number = text if ok else None
    else:
        match = NUMBER.search(text)
        number = match.group() if match else None
    if number is None:
        return None
    try:
        value = float(number)
    except ValueError:
        return None
    return value if 0 <= value <= max_score else None


def greedy_answers(lm: Any, prompts: list[str], max_new_tokens: int, batch_size: int) -> list[str]:
    """Each prompt's greedy continuation up to its first line break or end of text (at most ``max_new_tokens``),
    decoded by the batched core (:class:`~dsgen.generation.decoding.DebiasedDecoder`, no counter rows, top-k 1)."""
    from dsgen.generation.decoding import DebiasedDecoder
    from dsgen.generation.outputs import DecodeRequest, OutputRules
    from dsgen.generation.sampling import SamplingConfig

    sampling = SamplingConfig(decay_constant=0.0, top_k=1, top_p=1.0, max_new_tokens=max_new_tokens, suppress_eos=False,
                              stop_at_newline=True)
    head = lm.model.get_output_embeddings()
    rules = OutputRules(lm.tokenizer, int(head.weight.shape[0]) if head is not None else None, end_ids=lm.end_ids(),
                        keep_unclosed=True)
    decoder = DebiasedDecoder(lm.model, lm.tokenizer, sampling, max_rows=batch_size, rules=rules)
    outputs = decoder.decode([DecodeRequest(p) for p in prompts], seed=0)
    return [out[0].raw.split("\n", 1)[0] if out else "" for out in outputs]


@dataclass
class LmJudgeConfig(Config):
    """Args:
        model: ``generator`` (the run's generator LM) or a causal LM name (alias, directory, Hub id).
        prompt: the scoring prompt with ``{x1}`` and ``{x2}`` (default: CLAIF's words on a 0-5 scale).
        chat: send the prompt as a user turn through the model's chat template.
        answer_prefix: the text that opens the answer, after which the score is read.
        read: ``expected`` (default: the digits' expected value) or ``written`` (the number the greedy answer writes;
            CLAIF, MultiCSR); the module docstring.
        parse: how a written answer is parsed: ``first`` (CLAIF: its first number) or ``exact`` (MultiCSR: the answer
            is the number).
        answer_tokens: the longest written answer decoded (16: a score comes first in the answers both papers ask
            for; CLAIF's answers go on with their reason, up to 256 tokens there, which the score never needs).
        max_score: the scale's top (CLAIF: 1, "from 0.0 to 1.0"; MultiCSR: 5); the label is score / max_score.
        max_per_x1_score: keep at most this many pairs of one x1 with one score (0: no cap); the pairs beyond get
            weight 0 (dropped). CLAIF's postprocessing keeps 2 per (x1, score) (``postprocess_dataset.py#L40-L44``,
            DINO's cap counted on the judge's score, since CLAIF scores before it postprocesses), in generation order
            here (CLAIF's after a seeded shuffle and a ``set()``); random pairs are not capped (CLAIF adds them after).
        replace_label: make the score the pair's label (CLAIF); False keeps the generated label and
            records the score as ``judge_score`` for a later stage (MultiCSR's self-curation).
        label_smoothing: ``s``: the label is ``(1 - s) * score + s / 2`` (CLAIF's postprocessing applies DINO's
            smoothing 0.2 to the judge's score: ``0.8 * score + 0.1``).
        judge_random_pairs: judge DINO's random augmentation pairs too; False keeps their label 0 (CLAIF adds
            them after scoring, unsmoothed).
        max_abstention_share: the run fails when the judge gives no score for more than this share of the pairs
            (:data:`dsgen.labelling.base.MAX_ABSTENTION_SHARE`, 0.1, says why); this local judge always gives one,
            a served one (``api-judge``) may not.
        batch_size: prompts scored together.
        device / dtype: of a judge model of its own.
    """

    model: str = "generator"
    prompt: str = DIGIT_PROMPT
    chat: bool = False
    answer_prefix: str = ""
    read: str = "expected"
    parse: str = "first"
    answer_tokens: int = 16
    max_score: int = 5
    max_per_x1_score: int = 0
    replace_label: bool = True
    label_smoothing: float = 0.0
    judge_random_pairs: bool = True
    max_abstention_share: float = MAX_ABSTENTION_SHARE
    batch_size: int = 32
    device: str = "auto"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if "{x1}" not in self.prompt or "{x2}" not in self.prompt:
            raise DsgenError("the judge's prompt must contain {x1} and {x2}")
        if not 1 <= self.max_score <= 9:
            raise DsgenError(f"max_score must be a single digit from 1 to 9 (got {self.max_score})")
        if self.read not in READS or self.parse not in PARSES:
            raise DsgenError(f"the judge's read must be one of {', '.join(READS)} and parse one of {', '.join(PARSES)} "
                             f"(got '{self.read}', '{self.parse}')")
        if self.answer_tokens < 1 or self.max_per_x1_score < 0:
            raise DsgenError(f"answer_tokens must be at least 1 and max_per_x1_score at least 0 (got "
                             f"{self.answer_tokens}, {self.max_per_x1_score})")
        check_abstention_share(self.max_abstention_share)


@LABELLERS.register("lm-judge")
class LmJudge(Labeller):
    """Labels each pair with an LM's similarity score / ``max_score``, written or expected (module docstring)."""

    config_class = LmJudgeConfig
    version = 4  # 2: the expected digit read through the exact prefill (dsgen.generation.judge): a pair's score is
    # the same bits in any batch; scores change in their last bits; 3: its layers by oneDNN's multiply where the probe
    # finds it invariant (dsgen.generation.kernels; last bits again); 4: a GPT-2 judge's Conv1D layers too
    citation = """@inproceedings{cheng-etal-2023-improving,
  title = {Improving Contrastive Learning of Sentence Embeddings from {AI} Feedback},
  author = {Cheng, Qinyuan and Yang, Xiaogui and Sun, Tianxiang and Li, Linyang and Qiu, Xipeng},
  booktitle = {Findings of the Association for Computational Linguistics: ACL 2023},
  year = {2023},
  pages = {11122--11138}
}"""

    def models(self, plan: Any) -> list[str]:
        return [] if self.config.model == "generator" else [self.config.model]

    def needs_generator_lm(self) -> bool:
        return self.config.model == "generator"

    def label_of(self, pair: Pair, score: float | None) -> Any:
        cfg = self.config
        if not cfg.judge_random_pairs and pair.extra.get("source") == "random":
            return pair.label  # a random pair's 0 means what a score would: it stands whatever the judge said
        if score is None:
            return None
        return (1.0 - cfg.label_smoothing) * score + cfg.label_smoothing / 2

    def lm(self, context: LabelContext) -> Any:
        cfg = self.config
        if cfg.model == "generator":
            if context.load_generator is None:
                raise DsgenError("the LM judge's model is the run's generator, and this method has none; "
                                 "set [labelling] model to a causal LM")
            return context.load_generator()
        if context.load_lm is not None:
            return context.load_lm(cfg.model, cfg.device, cfg.dtype)
        from dsgen.models import shared_causal_lm

        return shared_causal_lm(cfg.model, cfg.device, cfg.dtype)

    def render(self, lm: Any) -> Any:
        """prompt text -> what the model continues (chat template, then the answer's opening)."""
        cfg = self.config
        if not cfg.chat:
            return lambda text: text + cfg.answer_prefix
        if not getattr(lm.tokenizer, "chat_template", None):
            raise DsgenError(f"the judge model '{lm.name}' has no chat template; set [labelling] chat = false")
        from dsgen.taskspec import TaskSpec

        spec = TaskSpec(f"the judge {self.name}", {}, {})  # renders as a chat spec's prompts are rendered
        return lambda text: spec.render(lm.tokenizer, [{"role": "user", "content": text}], cfg.answer_prefix)

    def score(self, pairs: list[Pair], context: LabelContext) -> LabelReport:
        import math

        import numpy as np

        from dsgen.generation.judge import cached_judgements, option_probabilities

        cfg = self.config
        lm = self.lm(context)
        texts = [(p.text_a, p.text_b or "") for p in pairs]
        settings = f"chat={cfg.chat}|answer={cfg.answer_prefix}|max={cfg.max_score}|read={cfg.read}"
        if cfg.read == "written":
            settings += f"|parse={cfg.parse}|tokens={cfg.answer_tokens}"

            def written(prompts: list[str]) -> list[float]:  # NaN: no score (cached like a score)
                values = [written_score(a, cfg.max_score, cfg.parse)
                          for a in greedy_answers(lm, prompts, cfg.answer_tokens, cfg.batch_size)]
                return [math.nan if v is None else v / cfg.max_score for v in values]

            judge = written
        else:
            digits = np.arange(cfg.max_score + 1)
            options = [(str(d), f" {d}") for d in digits]

            def judge(prompts: list[str]) -> Any:
                return option_probabilities(lm, prompts, options, cfg.batch_size) @ digits / cfg.max_score

        scores = cached_judgements(lm, texts, cfg.prompt, judge, render=self.render(lm), settings=settings,
                                   progress=context.progress, what="label")
        return LabelReport([None if math.isnan(x) else float(x) for x in scores],
                           {"judge": lm.name, "chat": cfg.chat, "read": cfg.read})

    def apply(self, pairs: list[Pair], context: LabelContext) -> tuple[list[Pair], dict[str, Any]]:
        """The labelling stage (:meth:`Labeller.apply`), then CLAIF's cap of pairs per (x1, score)
        (``max_per_x1_score``): the pairs beyond it get weight 0 and are counted."""
        out, summary = super().apply(pairs, context)
        cap = self.config.max_per_x1_score
        if cap:
            seen: dict[tuple[str, Any], int] = {}
            capped = 0
            for i, p in enumerate(out):
                score = p.extra.get("judge_score")
                if score is None or p.extra.get("source") == "random" or p.weight == 0:
                    continue
                seen[(p.text_a, score)] = seen.get((p.text_a, score), 0) + 1
                if seen[(p.text_a, score)] > cap:
                    out[i] = Pair(p.text_a, p.text_b, p.label, 0.0, {**p.extra, "dropped": "max_per_x1_score"})
                    capped += 1
            summary["dropped_max_per_x1_score"] = capped
        return out, summary
