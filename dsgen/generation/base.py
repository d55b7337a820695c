"""The ``Generator`` interface: task spec + optional input texts -> labelled pairs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from dsgen.data.pairs import Pair


class Generator(ABC):
    """Produces a dataset of labelled pairs and writes it to ``out`` (JSONL + sidecar).

    Implementations must be deterministic for a given configuration and inputs, and
    resumable: calling :meth:`generate` again after a crash continues the work (unless
    ``resume`` is False, which starts over).

    The runner caches datasets under :meth:`dataset_key`; the default key covers the
    generator's name, :meth:`get_config_dict` and the inputs. A generator whose output also
    depends on something else (a model's weights, a task spec file) must add it.
    """

    name: str = "generator"

    @classmethod
    def for_runner(cls, config: Any, runner: Any) -> "Generator":
        """The generator the runner uses for ``config`` (override to take shared resources from the
        runner, such as a loaded model or the data folder)."""
        return cls(config)  # type: ignore[call-arg]

    @abstractmethod
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        """Generate pairs for ``inputs`` (None when the task makes x1 from scratch)."""

    @abstractmethod
    def get_config_dict(self) -> dict[str, Any]:
        """Everything that determines the output, for sidecars and the dataset cache key."""

    def dataset_key(self, inputs: list[str] | None) -> str:
        """The cache key of the dataset this generator makes from ``inputs`` (see :mod:`dsgen.identity`)."""
        from dsgen.identity import dataset_key

        return dataset_key(self.name, self.get_config_dict(), inputs)
