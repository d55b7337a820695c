"""Pair files: JSONL with ``text_a``, ``text_b``, ``label`` (DINO-compatible), optional ``weight``
and provenance fields (``source``: ``generated`` or ``random``; ``attempt``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import read_jsonl, write_jsonl
from dsgen.errors import DsgenError


def parse_label(label: Any) -> Any:
    """Numeric labels ("0.5") become floats; others (``entailment``) stay strings."""
    if isinstance(label, (int, float)) or label is None:
        return label
    try:
        return float(label)
    except ValueError:
        return label


@dataclass
class Pair:
    """One labelled text pair."""

    text_a: str
    text_b: str | None
    label: Any
    weight: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[Any, ...]:
        return (self.text_a, self.text_b, self.label)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"text_a": self.text_a, "text_b": self.text_b, "label": self.label}
        if self.weight is not None:
            row["weight"] = self.weight
        row.update(self.extra)
        return row

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> "Pair":
        extra = {k: v for k, v in row.items() if k not in ("text_a", "text_b", "label", "weight")}
        return cls(row["text_a"], row.get("text_b"), parse_label(row.get("label")), row.get("weight"), extra)


def write_pairs(path: str | Path, pairs: list[Pair]) -> None:
    write_jsonl(path, (p.to_dict() for p in pairs))


def write_dataset(path: str | Path, pairs: list[Pair], **sidecar: Any) -> None:
    """A generated dataset: ``pairs`` at ``path`` with its sidecar (``sidecar`` fields). An older pairs file there goes
    first, then the sidecar is written, then the pairs: the pairs file appearing marks the dataset complete, and a
    kill at any moment never leaves older pairs under a newer sidecar."""
    from dsgen.artifacts import write_sidecar

    Path(path).unlink(missing_ok=True)
    write_sidecar(path, **sidecar)
    write_pairs(path, pairs)


def read_pairs(path: str | Path) -> list[Pair]:
    rows = read_jsonl(path)
    for i, row in enumerate(rows, 1):
        if "text_a" not in row or not isinstance(row["text_a"], str):
            raise DsgenError(f"{path}: entry {i} has no 'text_a' string; a pair file needs text_a, text_b, label")
    return [Pair.from_dict(r) for r in rows]
