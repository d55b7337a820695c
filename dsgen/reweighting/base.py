"""The ``Reweighter`` interface and the registry of reweighters.

A reweighter scores every training pair with a weight in [0, 1]; the trainer multiplies each
example's loss by it, and weight 0 means "dropped". Some reweighters learn first: a fit that depends on
the data alone (RISE's SDI classifier, fit on the dataset's machine sentences and the human source) is
declared as a data-level fit (:mod:`dsgen.data.fits`: ``data_fit()``), made once per dataset by the
engine and found in ``self.fitted``; all see a :class:`ReweightContext`.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from dsgen.component import PairStage
from dsgen.data.fits import FitsOnData
from dsgen.data.pairs import Pair
from dsgen.registry import Registry


@dataclass
class ReweightContext:
    """What a reweighter may use besides the pairs.

    Args:
        human_texts: the human-written generation inputs x1 (None when x1 was generated too).
        source: where the inputs came from (``stsb-train`` or a text file): its whole content is
            the human side of RISE's classifier.
        data_dir: the STS data folder (for named sources).
        seed: the run's training seed (a data-level fit has the data seed, :mod:`dsgen.data.fits`).
        load_generator: returns the generator LM (a ``dsgen.models.LoadedLM``), loaded on demand.
        device: cpu, cuda or auto.
        progress: show progress bars.
    """

    human_texts: list[str] | None = None
    source: str | None = None
    data_dir: str | None = None
    seed: int = 42
    load_generator: Callable[[], Any] | None = None
    device: str = "auto"
    progress: bool = True


def source_texts(source: str | None, data_dir: str | None) -> list[str]:
    """Every distinct sentence of the source the inputs come from (``stsb-train`` or a text file): the
    human side of RISE's classifier. The runner keys a run by these texts (an edited file is a new run)."""
    from dsgen.data.inputs import load_inputs

    if source is None:
        raise ValueError("no inputs source: x1 was generated too")
    return load_inputs(source, None, data_dir, distinct=True)


@dataclass
class ReweightReport:
    """Weights and what the reweighter wants a reader to know (accuracy, kept fractions...)."""

    weights: list[float]
    info: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, list[Any]] = field(default_factory=dict)  # per-pair values kept in Pair.extra


class Reweighter(PairStage, FitsOnData):
    """Scores pairs with weights in [0, 1].

    Subclasses implement :meth:`score` (and, as every :class:`~dsgen.component.PairStage`, ``models`` and
    ``needs_generator_lm`` when they load a model; ``data_fit`` when they fit on the data alone,
    :mod:`dsgen.data.fits`); :meth:`apply` returns the pairs with their ``weight`` set (multiplied into any
    weight they already carry) and a summary for the result file.
    """

    kind: ClassVar[str] = "reweighter"

    @abstractmethod
    def score(self, pairs: list[Pair], context: ReweightContext) -> ReweightReport:
        """Return one weight in [0, 1] per pair (fitting whatever the reweighter needs first)."""

    def reads_source(self) -> bool:
        """Whether it reads the inputs' whole source (``ReweightContext.source``; RISE's human class):
        then the source's texts enter the run key."""
        return False

    def apply(self, pairs: list[Pair], context: ReweightContext) -> tuple[list[Pair], dict[str, Any]]:
        import numpy as np

        report = self.score(pairs, context)
        w = np.asarray(report.weights, dtype=float)
        if len(w) != len(pairs) or (len(w) and (w.min() < 0 or w.max() > 1 or np.isnan(w).any())):
            raise ValueError(f"reweighter {self.name} returned weights outside [0, 1] or of the wrong length")
        out = [Pair(p.text_a, p.text_b, p.label, (1.0 if p.weight is None else p.weight) * float(x),
                    {**p.extra, **{k: v[i] for k, v in report.annotations.items()}})
               for i, (p, x) in enumerate(zip(pairs, w))]
        summary = {"reweighter": self.name, "n": len(w), "kept": int((w > 0).sum()),
                   "mean_weight": round(float(w.mean()), 4) if len(w) else None,
                   "weight_quantiles": {q: round(float(np.quantile(w, q / 100)), 4) for q in (0, 10, 25, 50, 75, 90, 100)}
                   if len(w) else {}, **report.info}
        return out, summary


def _builtins() -> None:
    import dsgen.reweighting.curation  # noqa: F401
    import dsgen.reweighting.discriminator  # noqa: F401
    import dsgen.reweighting.random_weights  # noqa: F401
    import dsgen.reweighting.sdi  # noqa: F401


REWEIGHTERS: Registry[type[Reweighter]] = Registry("reweighter", base_cls=Reweighter,
                                                   entry_point_group="dsgen.reweighters", builtins=_builtins)
