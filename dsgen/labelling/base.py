"""The ``Labeller`` interface and the registry of labellers.

A labeller reads each pair and gives it a judge's label (CLAIF: an LM's 0-5 similarity score) or a
rating that a later stage acts on (MultiCSR's self-curation). It runs after postprocessing and before
reweighting (generator -> postprocess -> labeller -> reweighter -> trainer), on the training and the
validation pairs alike, so that model selection sees the labels training sees.

A judge may give a pair no score (it *abstains*: an API judge whose answer holds no score). Such a pair
has no label: the label it came with means something else (CLAIF's generated label is the masking rate,
whose scale runs the other way), so keeping it would train on a wrong target. With ``replace_label`` an
abstained pair is therefore dropped: label None, weight 0 (the trainer drops weight 0; model selection reads
numeric labels only), its generated label kept as ``generated_label``. The papers drop such answers too
(CLAIF ``modeling.py#L230-L233``, an answer without a number; MultiCSR ``flan_filter.py#L155-L156``, a triplet
whose two ratings are not both scores). Without ``replace_label`` the generated label is the pair's label and
stays; the stage that reads ``judge_score`` decides (self-curation drops the triplet). Every run counts its
abstentions (``abstained`` in the summary) and fails with one line when more than ``max_abstention_share``
of its pairs abstain (:func:`count_abstentions`, which self-curation uses as well).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

from dsgen.component import PairStage
from dsgen.data.fits import FitsOnData
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.registry import Registry

MAX_ABSTENTION_SHARE = 0.1
"""The default ``max_abstention_share`` of the labellers and of self-curation: a run fails when its judge gives
no score for more than one pair in ten. The local judge never abstains (it reads the digits' distribution),
and an API judge that parses its answer as the papers do abstains on the odd answer that holds no number in
range (a refusal, a word); both papers drop such answers and go on. A share above a tenth is no longer an odd
answer but a judge that does not answer the question as asked (a prompt, chat template or tokenizer
mismatch: a space token before the digit made every answer an abstention), and the pairs it did score are
a subset it chose, not the method's data: then the run is a failure to fix, not a result."""


def check_abstention_share(share: float) -> None:
    """A one-line error unless ``max_abstention_share`` is a share (in [0, 1])."""
    if not 0.0 <= share <= 1.0:
        raise DsgenError(f"max_abstention_share must be in [0, 1] (got {share})")


def count_abstentions(scores: Sequence[float | None], max_share: float, who: str, section: str) -> dict[str, Any]:
    """How many pairs the judge gave no score (None), for the stage's summary; a one-line error when more
    than ``max_share`` of them did (see :data:`MAX_ABSTENTION_SHARE`).

    Args:
        scores: one judge score per pair, None where the judge abstained.
        max_share: the largest share of abstentions the run accepts.
        who: the stage, for the message (``labeller api-judge``).
        section: the preset section that holds its ``max_abstention_share`` (``labelling``).
    """
    n = len(scores)
    abstained = sum(1 for x in scores if x is None)
    share = abstained / n if n else 0.0
    if share > max_share:
        raise DsgenError(f"{who}: the judge gave no score for {abstained} of {n} pairs ({share:.0%}), more than "
                         f"[{section}] max_abstention_share = {max_share:g} allows; check the judge's prompt and "
                         "model, or raise the share")
    return {"abstained": abstained, "abstained_share": round(share, 4)}


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
    """One score per pair in [0, 1] (None: the judge abstained, see the module docstring) and what the
    labeller wants a reader to know."""

    scores: list[float | None]
    info: dict[str, Any] = field(default_factory=dict)


class Labeller(PairStage, FitsOnData):
    """Scores pairs in [0, 1]; :meth:`apply` makes the score the label (``replace_label``) or keeps it
    beside the pair as ``judge_score``, and keeps the generated label as ``generated_label``. Its config's
    ``replace_label`` (default True) and ``max_abstention_share`` (default :data:`MAX_ABSTENTION_SHARE`) are
    read where it has them. A labeller that fits something on the data alone declares it (``data_fit``,
    :mod:`dsgen.data.fits`): the engine makes it once per dataset and sets ``self.fitted`` before it runs."""

    kind: ClassVar[str] = "labeller"

    @abstractmethod
    def score(self, pairs: list[Pair], context: LabelContext) -> LabelReport:
        """One score in [0, 1] per pair (None where the judge gives none)."""

    @property
    def replaces_label(self) -> bool:
        return bool(getattr(self.config, "replace_label", True))

    @property
    def max_abstention_share(self) -> float:
        return float(getattr(self.config, "max_abstention_share", MAX_ABSTENTION_SHARE))

    def label_of(self, pair: Pair, score: float | None) -> Any:
        """The label a pair gets from its score: the score itself, None (no label: the pair is dropped) when the
        judge abstained. A labeller may smooth it, or keep some labels whatever the judge said."""
        return score

    def apply(self, pairs: list[Pair], context: LabelContext) -> tuple[list[Pair], dict[str, Any]]:
        import numpy as np
        from scipy.stats import spearmanr

        report = self.score(pairs, context)
        given = [x for x in report.scores if x is not None]
        s = np.asarray(given, dtype=float)
        if len(report.scores) != len(pairs) or (len(s) and (np.isnan(s).any() or s.min() < 0 or s.max() > 1)):
            raise ValueError(f"labeller {self.name} returned scores outside [0, 1] or of the wrong length")
        abstentions = count_abstentions(report.scores, self.max_abstention_share, f"labeller {self.name}", "labelling")
        out = []
        for p, x in zip(pairs, report.scores):
            judged = x is not None
            extra = {**p.extra, "judge_score": round(float(x), 6) if judged else None, "generated_label": p.label}
            label, weight = p.label, p.weight
            if self.replaces_label:  # an abstained pair has no label: dropped (module docstring)
                label = self.label_of(p, float(x) if judged else None)
                label, weight = (round(float(label), 6), weight) if label is not None else (None, 0.0)
            out.append(Pair(p.text_a, p.text_b, label, weight, extra))
        numeric = [(float(p.label), float(x)) for p, x in zip(pairs, report.scores)
                   if x is not None and isinstance(p.label, (int, float))]
        agreement = None
        if len(numeric) > 2 and len({a for a, _ in numeric}) > 1 and len({b for _, b in numeric}) > 1:
            agreement = round(float(spearmanr(*zip(*numeric)).statistic), 4)
        summary = {"labeller": self.name, "n": len(pairs), **abstentions,
                   "dropped_unlabelled": sum(1 for p in out if p.label is None) if self.replaces_label else 0,
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
