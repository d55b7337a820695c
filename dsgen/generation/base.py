"""The ``Generator`` interface: task spec + optional input texts -> labelled pairs."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

from dsgen.component import Component
from dsgen.data.pairs import Pair, parse_label


@dataclass
class GenerationContext:
    """What a generator may use besides its config (shaped like the reweighters' context).

    Args:
        data_dir: the STS data folder (for named sources such as ``stsb-train``).
        backend: where chunks decode (:mod:`dsgen.generation.backends`; None: this process).
        load_lm: ``(name, device, dtype) -> LoadedLM``; default :func:`dsgen.models.shared_causal_lm`,
            the process-wide model cache that generation and a zero-shot judge share.
        device: the command line's device, when it set one.
        progress: show progress bars.
    """

    data_dir: str | None = None
    backend: Any = None
    load_lm: Callable[[str, str, str], Any] | None = None
    device: str | None = None
    progress: bool = True

    def lm(self, name: str, device: str, dtype: str) -> Any:
        """The causal LM ``name`` (loaded once per process)."""
        if self.load_lm is not None:
            return self.load_lm(name, device, dtype)
        from dsgen.models import shared_causal_lm

        return shared_causal_lm(name, device, dtype)


class Generator(Component):
    """Produces a dataset of labelled pairs and writes it to ``out`` (JSONL + sidecar).

    Implementations must be deterministic for a given configuration and inputs, and
    resumable: calling :meth:`generate` again after a crash continues the work (unless
    ``resume`` is False, which starts over).

    The runner caches datasets under :meth:`dataset_key`; the default key covers the
    generator's name and version, :meth:`get_config_dict` and the inputs' texts. A generator whose
    output also depends on something else (a model's weights, a task spec file) must add it.
    """

    kind: ClassVar[str] = "generator"
    supports_debiasing: ClassVar[bool] = False  # whether it can apply self-debiasing (an API cannot)

    @classmethod
    def build(cls, config: Any, context: GenerationContext) -> "Generator":
        """The generator for ``config`` in ``context`` (override to take shared resources from it,
        such as the model loader or the data folder)."""
        return cls(config)

    def get_config_dict(self) -> dict[str, Any]:
        """The generator's settings (its registry name goes into keys beside them: a config's ``generator``
        field names the LM it runs)."""
        return self.config.to_dict()

    def needs_inputs(self) -> bool:
        """Whether it continues input texts x1 (False: it makes x1 itself, or reads no inputs)."""
        return True

    @abstractmethod
    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        """Generate pairs for ``inputs`` (None when the task makes x1 from scratch)."""

    def dataset_key(self, inputs: list[str] | None) -> str:
        """The cache key of the dataset this generator makes from ``inputs`` (see :mod:`dsgen.identity`)."""
        from dsgen.identity import dataset_key, texts_key

        return dataset_key(self.name, self.version, self.get_config_dict(), texts_key(inputs))


class PairCollector:
    """Accepted outputs -> pairs, as every generator makes them: DINO's (x1, text, label), or for a structured
    output one pair per field its spec pairs; repeated (x1, x2, y) counted and dropped when ``remove_duplicates``."""

    def __init__(self, output: Any, with_inputs: bool, remove_duplicates: bool = True) -> None:
        self.output, self.with_inputs, self.remove_duplicates = output, with_inputs, remove_duplicates
        self.pairs: list[Pair] = []
        self.duplicates = 0
        self._seen: set[tuple] = set()

    def add(self, x1: str | None, label: str, text: str, extra: dict[str, Any]) -> None:
        if self.output is not None and self.output.structured:
            made = [Pair(a, b, parse_label(lab), extra={**extra, "prompt_label": label})
                    for a, b, lab in self.output.pair_texts(x1, text)]
        else:
            made = [Pair(x1, text, parse_label(label), extra=extra) if self.with_inputs  # type: ignore[arg-type]
                    else Pair(text, None, parse_label(label), extra=extra)]
        for pair in made:
            if self.remove_duplicates:
                if pair.key() in self._seen:
                    self.duplicates += 1
                    continue
                self._seen.add(pair.key())
            self.pairs.append(pair)
