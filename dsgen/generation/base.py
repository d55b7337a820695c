"""The ``Generator`` interface: task spec + optional input texts -> labelled pairs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from dsgen.data.pairs import Pair


class Generator(ABC):
    """Produces a dataset of labelled pairs and writes it to ``out`` (JSONL + sidecar).

    Implementations must be deterministic for a given configuration and inputs, and
    resumable: calling :meth:`generate` again after a crash continues the work.
    """

    name: str = "generator"

    @abstractmethod
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True) -> list[Pair]:
        """Generate pairs for ``inputs`` (None when the task makes x1 from scratch)."""

    @abstractmethod
    def get_config_dict(self) -> dict[str, Any]:
        """Everything that determines the output, for sidecars and the dataset cache key."""
