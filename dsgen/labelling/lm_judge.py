"""An LM as a similarity judge: the label is the expected score over the digits 0 to 5 (CLAIF's scale).

The judge fills a scoring prompt with the pair and reads the next-token probabilities of the digits
``0`` ... ``max_score`` (each with and without a leading space) where the answer begins; the label
is the expected digit divided by ``max_score``, so in [0, 1] like DINO's labels. Reading the
distribution rather than a sampled answer is exact and deterministic, and batch-invariant like the
zero-shot discriminator (:mod:`dsgen.generation.judge`). A chat model gets the prompt as a user turn
through its chat template, the assistant's answer opened with ``answer_prefix``.

Default prompt: CLAIF's (Cheng et al., ACL 2023; ``modeling.py#L197-L200``) on a 0-5 scale, read where
its answer's number begins (CLAIF's own asks for 0.0-1.0, which one digit cannot express). ``model = "generator"`` judges with the run's generator LM (as CLAIF asks the LLM that
generated nothing here, this is the same model doing both); any causal LM name gives a separate judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsgen.config import Config
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling.base import (LABELLERS, MAX_ABSTENTION_SHARE, LabelContext, Labeller, LabelReport,
                                   check_abstention_share)

# CLAIF's scoring prompt (xiami2019/CLAIF@34f0dce:modeling.py#L197-L200, the double space included) asks for a score
# from 0.0 to 1.0 and parses the first number of a sampled answer. A single next-token digit cannot say 0.0-1.0, so
# this judge asks for 0 to 5 in the same words and reads the expected digit (a named departure).
CLAIF_PROMPT = ("The similarity score for two sentences is in the range from 0 to 5, 0 means completely different and 5 "
                "means almost the same.\nNow give two sentences '{x1}' and  '{x2}', please give a similarity score of "
                "these two sentences and give the reason:\nThe similarity score for these two sentences is")


@dataclass
class LmJudgeConfig(Config):
    """Args:
        model: ``generator`` (the run's generator LM) or a causal LM name (alias, directory, Hub id).
        prompt: the scoring prompt with ``{x1}`` and ``{x2}``.
        chat: send the prompt as a user turn through the model's chat template.
        answer_prefix: the text that opens the answer, after which the digit is read.
        max_score: the scale's top (CLAIF: 5); the label is E[digit] / max_score.
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
    prompt: str = CLAIF_PROMPT
    chat: bool = False
    answer_prefix: str = ""
    max_score: int = 5
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
        check_abstention_share(self.max_abstention_share)


@LABELLERS.register("lm-judge")
class LmJudge(Labeller):
    """Labels each pair with an LM's expected 0-5 similarity score / 5 (see the module docstring)."""

    config_class = LmJudgeConfig
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
        import numpy as np

        from dsgen.generation.judge import cached_judgements, option_probabilities

        cfg = self.config
        lm = self.lm(context)
        digits = np.arange(cfg.max_score + 1)
        options = [(str(d), f" {d}") for d in digits]

        def expected(prompts: list[str]) -> Any:
            return option_probabilities(lm, prompts, options, cfg.batch_size) @ digits / cfg.max_score

        texts = [(p.text_a, p.text_b or "") for p in pairs]
        settings = f"chat={cfg.chat}|answer={cfg.answer_prefix}|max={cfg.max_score}"
        scores = cached_judgements(lm, texts, cfg.prompt, expected, render=self.render(lm), settings=settings,
                                   progress=context.progress, what="label")
        return LabelReport([float(x) for x in scores], {"judge": lm.name, "chat": cfg.chat})
