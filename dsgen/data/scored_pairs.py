"""Sentence pairs with gold similarity scores: what every STS reader returns.

The local readers (:mod:`dsgen.data.sts`) and the Hub copies (:mod:`dsgen.data.hub`) both build a
:class:`PairSet`; the evaluation reads it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PairSet:
    """Sentence pairs with gold scores."""

    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]

    def __len__(self) -> int:
        return len(self.scores)

    def extend(self, other: "PairSet") -> None:
        self.sentences1 += other.sentences1
        self.sentences2 += other.sentences2
        self.scores += other.scores


__all__ = ["PairSet"]
