"""The ``Trainer`` interface: weighted pairs -> a trained sentence encoder, and the registry of trainers."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsgen.component import Component
from dsgen.data.pairs import Pair
from dsgen.registry import Registry


@dataclass
class TrainingOutcome:
    """A trained encoder (a ``SentenceTransformer``) and what happened while training it.

    ``log`` carries what :func:`dsgen.training.fit.fit` records: ``optimizer_steps`` taken,
    ``nonzero_lr_steps`` among them, ``weight_update`` (relative L2 norm of the change of the trained
    parameters) and the floor ``min_trained_steps``; the runner fails a run whose log does not show that it
    trained (:func:`dsgen.training.fit.training_failure`), so a trainer that does not train through ``fit``
    must record them itself.
    """

    model: Any
    log: dict[str, Any] = field(default_factory=dict)


class Trainer(Component):
    """Trains a sentence encoder on pairs whose ``weight`` (None = 1) scales each example's loss.

    Pairs of weight 0 are dropped before training. Subclasses take one config dataclass and
    report it through :meth:`get_config_dict`.
    """

    kind: ClassVar[str] = "trainer"

    @abstractmethod
    def train(self, train: list[Pair], validation: list[Pair], seed: int, progress: bool = True) -> TrainingOutcome:
        """Train on ``train``; use ``validation`` for model selection where the trainer does that."""

    def models(self, plan: Any) -> list[str]:
        """Models it loads besides the encoder it trains (a guide), whose fingerprints enter the run key."""
        return []


def _builtins() -> None:
    import dsgen.training.contrastive  # noqa: F401
    import dsgen.training.regression  # noqa: F401


TRAINERS: Registry[type[Trainer]] = Registry("trainer", base_cls=Trainer, entry_point_group="dsgen.trainers",
                                             builtins=_builtins)


def weighted(pairs: list[Pair]) -> list[tuple[Pair, float]]:
    """(pair, weight) for every pair whose weight is not 0 (None counts as 1)."""
    out = []
    for p in pairs:
        w = 1.0 if p.weight is None else float(p.weight)
        if w > 0:
            out.append((p, w))
    return out
