"""The ``Labeller`` interface and the registry of labellers.

A labeller reads each pair and gives it a judge's label (CLAIF: an LM's 0-5 similarity score) or a
rating that a later stage acts on (MultiCSR's self-curation). It runs after postprocessing and before
reweighting (generator -> postprocess -> labeller -> reweighter -> trainer), on the training and the
validation pairs alike, so that model selection sees the labels training sees.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from dsgen.component import Component
from dsgen.data.pairs import Pair
from dsgen.registry import Registry


@dataclass
class LabelContext:
    """What a labeller may use besides the pairs.

    Args:
        load_generator: returns the run's generator LM (a ``dsgen.models.LoadedLM``), loaded on demand.
        load_lm: ``(name, device, dtype) -> LoadedLM`` for a judge model of its own (the process-wide cache).
        seed: the run's training seed.
        device: cpu, cuda or auto.
        progress: show progress bars.
        cache: a folder for what a labeller keeps between runs (an API judge's requests).
    """

    load_generator: Callable[[], Any] | None = None
    load_lm: Callable[[str, str, str], Any] | None = None
    seed: int = 42
    device: str = "auto"
    progress: bool = True
    cache: Any = None


@dataclass
class LabelReport:
    """One score per pair in [0, 1] (None: the judge gave none, and the pair keeps its label) and what the
    labeller wants a reader to know."""

    scores: list[float | None]
    info: dict[str, Any] = field(default_factory=dict)


class Labeller(Component):
    """Scores pairs in [0, 1]; :meth:`apply` makes the score the label (``replace_label``) or keeps it
    beside the pair as ``judge_score``, and keeps the generated label as ``generated_label``."""

    kind: ClassVar[str] = "labeller"

    @abstractmethod
    def score(self, pairs: list[Pair], context: LabelContext) -> LabelReport:
        """One score in [0, 1] per pair."""

    def models(self, plan: Any) -> list[str]:
        """Names of the models this labeller loads besides the run's generator (fingerprints enter the run key)."""
        return []

    def needs_generator_lm(self) -> bool:
        """Whether it judges with the run's generator LM (impossible when that is an API)."""
        return False

    @property
    def replaces_label(self) -> bool:
        return bool(getattr(self.config, "replace_label", True))

    def label_of(self, pair: Pair, score: float) -> Any:
        """The label a pair gets from its score (the score itself; a labeller may smooth it, or keep some labels)."""
        return score

    def apply(self, pairs: list[Pair], context: LabelContext) -> tuple[list[Pair], dict[str, Any]]:
        import numpy as np
        from scipy.stats import spearmanr

        report = self.score(pairs, context)
        given = [x for x in report.scores if x is not None]
        s = np.asarray(given, dtype=float)
        if len(report.scores) != len(pairs) or (len(s) and (np.isnan(s).any() or s.min() < 0 or s.max() > 1)):
            raise ValueError(f"labeller {self.name} returned scores outside [0, 1] or of the wrong length")
        out = []
        for p, x in zip(pairs, report.scores):
            judged = x is not None
            extra = {**p.extra, "judge_score": round(float(x), 6) if judged else None, "generated_label": p.label}
            label = round(float(self.label_of(p, float(x))), 6) if self.replaces_label and judged else p.label
            out.append(Pair(p.text_a, p.text_b, label, p.weight, extra))
        numeric = [(float(p.label), float(x)) for p, x in zip(pairs, report.scores)
                   if x is not None and isinstance(p.label, (int, float))]
        agreement = None
        if len(numeric) > 2 and len({a for a, _ in numeric}) > 1 and len({b for _, b in numeric}) > 1:
            agreement = round(float(spearmanr(*zip(*numeric)).statistic), 4)
        summary = {"labeller": self.name, "n": len(pairs), "no_score": len(pairs) - len(s),
                   "replaced_labels": self.replaces_label,
                   "mean_score": round(float(s.mean()), 4) if len(s) else None,
                   "score_quantiles": {q: round(float(np.quantile(s, q / 100)), 4) for q in (0, 10, 25, 50, 75, 90, 100)}
                   if len(s) else {}, "spearman_with_generated_labels": agreement, **report.info}
        return out, summary


def _builtins() -> None:
    import dsgen.labelling.api_judge  # noqa: F401
    import dsgen.labelling.lm_judge  # noqa: F401


LABELLERS: Registry[type[Labeller]] = Registry("labeller", base_cls=Labeller, entry_point_group="dsgen.labellers",
                                               builtins=_builtins)
