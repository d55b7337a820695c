"""Human-labelled pairs as a "generator": the reference row every generated dataset is read against.

DINO's Table 1 puts supervised rows beside its generated-data rows; here the ``human`` method
trains the same encoder with the same trainer on as many human-labelled STS benchmark train
pairs as the compared method's dataset holds (gold score / 5 as the label), drawn with the
run's data seed the way every method draws its inputs (:func:`dsgen.data.inputs.draw`: the first n of
the source's pairs in an order the data seed draws; all of them, in file order, when n covers the
source). It is also the control that shows the encoder and trainer can learn at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen import citations
from dsgen.config import Config
from dsgen.data.pairs import Pair, write_dataset
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.base import GenerationContext, Generator

SOURCES = ("stsb-train",)


@dataclass
class HumanPairsConfig(Config):
    """Args:
        source: the human-labelled pairs (``stsb-train``: the STS benchmark train split, 5,749 pairs).
        n_pairs: how many to draw (0: all); a method with ``size_of`` sets it at run time. More than
            the source holds is capped at all of them, and the dataset says so (``capped``): a
            learning curve's human point beyond 5,749 pairs is the whole human set.
        seed: which ones (the run's data seed: :func:`dsgen.data.inputs.draw`).
    """

    source: str = "stsb-train"
    n_pairs: int = 0
    seed: int = 42


@GENERATORS.register("human")
class HumanPairsGenerator(Generator):
    """Draws ``n_pairs`` human pairs of the source (label = gold / 5); ``inputs`` are ignored."""

    config_class = HumanPairsConfig
    citation = citations.STSB
    version = 2  # 2: pairs drawn as every method's inputs (dsgen.data.inputs.draw), was random.sample

    def __init__(self, config: HumanPairsConfig | None = None, data_dir: str | None = None) -> None:
        super().__init__(config)
        if self.config.source not in SOURCES:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("human pair source", self.config.source, SOURCES))
        self.data_dir = data_dir
        self._pairs: list[Pair] | None = None

    @classmethod
    def build(cls, config: HumanPairsConfig, context: GenerationContext) -> "HumanPairsGenerator":
        return cls(config, context.data_dir)

    def needs_inputs(self) -> bool:
        return False

    def source_pairs(self) -> list[Pair]:
        """Every pair of the source, in file order."""
        if self._pairs is None:
            from dsgen.data.sts import data_dir, read_stsb

            gold = read_stsb(data_dir(self.data_dir), "train")
            self._pairs = [Pair(a, b, round(s / 5.0, 6), extra={"source": "human"})
                           for a, b, s in zip(gold.sentences1, gold.sentences2, gold.scores)]
        return self._pairs

    def get_config_dict(self) -> dict[str, Any]:
        from dsgen.identity import content_key

        # the pairs' content, not the folder they were read from, identifies the source
        return {**super().get_config_dict(),
                "source_fingerprint": content_key([p.to_dict() for p in self.source_pairs()], length=16)}

    def generate(self, inputs: list[str] | None, out: Path, progress: bool = True, resume: bool = True) -> list[Pair]:
        from dsgen.data.inputs import draw

        pool = self.source_pairs()
        asked = self.config.n_pairs or len(pool)
        pairs = draw(pool, asked, self.config.seed)
        write_dataset(out, pairs, kind="human-pairs", generator_name=self.name, config=self.get_config_dict(),
                      dataset_key=self.dataset_key(inputs), n_pairs=len(pairs), asked=asked, capped=asked > len(pool),
                      timings={"generate_seconds": 0.0})
        return pairs
