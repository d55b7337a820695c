"""GenSE's discriminator filter (Chen et al., EMNLP 2022): keep only the pairs a discriminator is
confident about; weights are 0 or 1.

Default scorer, needing nothing beyond the generator: the generator LM itself, zero-shot, on
GenSE's discrimination prompt ``if "[X1]", does this mean that "[X2]"? true or false``; P(true)
is the next-token probability of "true" normalised over "true" and "false" (each word summed
over its spellings " true", "true", " True", "True"). Option: any NLI cross-encoder
(sentence-transformers ``CrossEncoder``), P(true) = P(entailment), P(false) = P(contradiction).

Rule (threshold alpha, GenSE: 0.9): a positive pair (``entailment``, or a numeric label >=
``positive_at``) is kept when P(true) >= alpha, a negative pair (``contradiction``, or a numeric
label <= ``negative_at``) when P(false) >= alpha; pairs in between (DINO's 0.5) are kept.

GenSE's code (``filter_data.py``) also drops, with every option on by default here:
- pairs whose x1 has fewer than 8 words or whose x2 has fewer than 5 (``str.split`` words);
- pairs where one sentence nearly contains the other: ``x2[:-1] in x1 or x1[:-1] in x2``
  (a case-sensitive substring test after dropping the last character, usually the full stop).
A triplet needs both of its pairs, so a dropped pair drops its triplet, as in GenSE.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dsgen import citations
from dsgen.config import Config
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext, Reweighter, ReweightReport

GENSE_DISCRIMINATION_PROMPT = 'if "{x1}", does this mean that "{x2}"? true or false'
TRUE_WORDS = (" true", "true", " True", "True")
FALSE_WORDS = (" false", "false", " False", "False")
ALMOST_NOTHING = 0.05


@dataclass
class DiscriminatorConfig(Config):
    """Args:
        alpha: confidence threshold (GenSE: 0.9).
        scorer: ``generator`` (zero-shot with the run's generator LM) or a cross-encoder id.
        prompt: the discrimination prompt with ``{x1}`` and ``{x2}``.
        positive_labels / negative_labels: string labels of each side.
        positive_at / negative_at: numeric labels at or above / at or below count as positive /
            negative (DINO's 1 and 0, also after label smoothing: 0.9 and 0.1).
        batch_size: pairs scored together.
        min_x1_words / min_x2_words: GenSE's length rules (8 and 5 words; 0: off).
        drop_containment: GenSE's rule against pairs where one sentence nearly contains the other.
        device: for a cross-encoder scorer.
    """

    alpha: float = 0.9
    scorer: str = "generator"
    prompt: str = GENSE_DISCRIMINATION_PROMPT
    positive_labels: tuple[str, ...] = ("entailment",)
    negative_labels: tuple[str, ...] = ("contradiction",)
    positive_at: float = 0.75
    negative_at: float = 0.25
    batch_size: int = 32
    min_x1_words: int = 8
    min_x2_words: int = 5
    drop_containment: bool = True
    device: str = "auto"

    def __post_init__(self) -> None:
        if not 0 <= self.alpha <= 1:
            raise DsgenError(f"discriminator alpha must be in [0, 1] (got {self.alpha})")
        if "{x1}" not in self.prompt or "{x2}" not in self.prompt:
            raise DsgenError("the discrimination prompt must contain {x1} and {x2}")
        self.positive_labels = tuple(self.positive_labels)
        self.negative_labels = tuple(self.negative_labels)


def lm_true_probability(lm: Any, pairs: list[tuple[str, str]], prompt: str, batch_size: int = 32,
                        progress: Any = None) -> Any:
    """P(true) normalised over {true, false} for each (x1, x2) with a causal LM, zero-shot
    (:func:`dsgen.generation.judge.option_probabilities`: a pair's score is the same bits in any batch)."""
    from dsgen.generation.judge import option_probabilities

    prompts = [prompt.format(x1=a, x2=b) for a, b in pairs]
    return option_probabilities(lm, prompts, [TRUE_WORDS, FALSE_WORDS], batch_size, progress)[:, 0]


def gense_rules(x1: str, x2: str, cfg: DiscriminatorConfig) -> str | None:
    """Why GenSE's code would drop the pair (None: it passes its length and containment rules)."""
    if cfg.min_x1_words and len(x1.split()) < cfg.min_x1_words:
        return "short_x1"
    if cfg.min_x2_words and len(x2.split()) < cfg.min_x2_words:
        return "short_x2"
    if cfg.drop_containment and (x2[:-1] in x1 or x1[:-1] in x2):
        return "containment"
    return None


def cross_encoder_probabilities(model_id: str, pairs: list[tuple[str, str]], batch_size: int, device: str) -> tuple[Any, Any]:
    """(P(entailment), P(contradiction)) from an NLI cross-encoder's softmax."""
    from sentence_transformers import CrossEncoder

    from dsgen.models import resolve_device

    try:
        ce = CrossEncoder(model_id, device=resolve_device(device))
    except (OSError, ValueError) as exc:
        raise DsgenError(f"cannot load cross-encoder '{model_id}': {str(exc).splitlines()[0]}") from None
    names = {i: str(n).lower() for i, n in ce.model.config.id2label.items()}
    try:
        ent = next(i for i, n in names.items() if n.startswith("entail"))
        con = next(i for i, n in names.items() if n.startswith("contradict"))
    except StopIteration:
        raise DsgenError(f"cross-encoder '{model_id}' has no entailment/contradiction labels ({names})") from None
    probs = ce.predict(pairs, batch_size=batch_size, apply_softmax=True, show_progress_bar=False)
    return probs[:, ent], probs[:, con]


@REWEIGHTERS.register("discriminator")
class DiscriminatorFilter(Reweighter):
    """Weights 1 for pairs the discriminator is confident about (see the module docstring), 0 otherwise.

    Example:
        >>> f = DiscriminatorFilter(DiscriminatorConfig(alpha=0.9))
        >>> f.keep([0.95, 0.5], [0.05, 0.5], ["entailment", "entailment"]).tolist()
        [1.0, 0.0]
    """

    config_class = DiscriminatorConfig
    citation = citations.GENSE
    version = 5  # 2: P(true) as a softmax over the answers (dsgen.generation.judge), last-bit differences; 3: through
    # the exact prefill, the same bits in any batch (last-bit differences); 4: its layers by oneDNN's multiply where
    # the probe finds it invariant (dsgen.generation.kernels; last-bit differences); 5: GPT-2's Conv1D layers too

    def __init__(self, config: DiscriminatorConfig | None = None) -> None:
        super().__init__(config or DiscriminatorConfig())

    def side(self, label: Any) -> str:
        cfg = self.config
        if isinstance(label, (int, float)):
            return "positive" if label >= cfg.positive_at else "negative" if label <= cfg.negative_at else "neutral"
        if label in cfg.positive_labels:
            return "positive"
        if label in cfg.negative_labels:
            return "negative"
        return "neutral"

    def keep(self, p_true: Any, p_false: Any, labels: list[Any]) -> Any:
        """The 0/1 weights of the threshold rule."""
        import numpy as np

        a = self.config.alpha
        out = np.ones(len(labels))
        for i, y in enumerate(labels):
            side = self.side(y)
            if side == "positive":
                out[i] = float(p_true[i] >= a)
            elif side == "negative":
                out[i] = float(p_false[i] >= a)
        return out

    def models(self, plan: Any) -> list[str]:
        return [] if self.config.scorer == "generator" else [self.config.scorer]

    def needs_generator_lm(self) -> bool:
        return self.config.scorer == "generator"

    def probabilities(self, pairs: list[Pair], context: ReweightContext) -> tuple[Any, Any]:

        cfg = self.config
        texts = [(p.text_a, p.text_b or "") for p in pairs]
        if cfg.scorer == "generator":
            if context.load_generator is None:
                raise DsgenError("the zero-shot discriminator needs the run's generator LM; set scorer to a cross-encoder id")
            from dsgen.generation.judge import cached_judgements, option_probabilities

            lm = context.load_generator()
            p_true = cached_judgements(
                lm, texts, cfg.prompt, lambda prompts: option_probabilities(lm, prompts, [TRUE_WORDS, FALSE_WORDS],
                                                                            cfg.batch_size)[:, 0],
                progress=context.progress, what="discriminate")
            return p_true, 1.0 - p_true
        return cross_encoder_probabilities(cfg.scorer, texts, cfg.batch_size, cfg.device)

    def score(self, pairs: list[Pair], context: ReweightContext) -> ReweightReport:
        import numpy as np

        p_true, p_false = self.probabilities(pairs, context)
        weights = self.keep(p_true, p_false, [p.label for p in pairs])
        dropped_by_rule: dict[str, int] = defaultdict(int)
        for i, p in enumerate(pairs):
            reason = gense_rules(p.text_a, p.text_b or "", self.config)
            if reason is not None:
                dropped_by_rule[reason] += int(weights[i] > 0)
                weights[i] = 0.0
        by_label: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(pairs):
            by_label[str(p.label)].append(i)
        kept = {}
        for label, idx in sorted(by_label.items()):
            frac = float(weights[idx].mean())
            side = self.side(pairs[idx[0]].label)
            q = np.quantile(p_true[idx], [0.1, 0.25, 0.5, 0.75, 0.9]).round(4).tolist()
            kept[label] = {"side": side, "n": len(idx), "kept_fraction": round(frac, 4), "p_true_quantiles_10_25_50_75_90": q}
        info: dict[str, Any] = {"alpha": self.config.alpha, "scorer": self.config.scorer, "per_label": kept,
                                "dropped_by_rule": dict(sorted(dropped_by_rule.items())),
                                "kept_fraction": round(float(weights.mean()), 4) if len(weights) else 0.0}
        starved = [lab for lab, k in kept.items() if k["side"] != "neutral" and k["kept_fraction"] < ALMOST_NOTHING]
        if starved:
            info["warning"] = (f"alpha {self.config.alpha} keeps almost nothing (< {ALMOST_NOTHING:.0%}) of label(s) "
                               f"{', '.join(starved)}; the threshold was not lowered")
        return ReweightReport(weights.tolist(), info, {"p_true": [round(float(x), 6) for x in p_true]})
