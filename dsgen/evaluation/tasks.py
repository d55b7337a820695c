"""STS tasks with validated metadata, registered by name.

Each task reads its pairs from the data directory (``dsgen.data.sts``) and checks the pair
count. Scores are Spearman correlation x100 between the cosine similarity of the two
embeddings and the gold score, as MTEB scores them (main score ``cosine_spearman``).

``sickr`` pools SICK's train, trial and test pairs (9927) as MTEB does; ``sickr-test`` uses
the 4927 test pairs as SentEval, Sentence-BERT, DINO and RISE do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dsgen.data import sts
from dsgen.data.scored_pairs import PairSet
from dsgen.errors import DsgenError
from dsgen.registry import Registry


@dataclass(frozen=True)
class StsTask:
    """Metadata and loader of one STS task.

    Args:
        name: registry name (``sts12`` ... ``sickr-test``).
        mteb_name: the MTEB task it reproduces, if any.
        description: one line.
        source: the folder of the shared data layout it reads.
        n_pairs: the exact number of scored pairs.
        citation: the dataset's paper.
    """

    name: str
    mteb_name: str | None
    description: str
    source: str
    n_pairs: int
    citation: str
    reader: Callable[[Path], PairSet]
    hub_name: str | None = None
    main_score: str = "cosine_spearman"
    senteval_lowercase: bool = True  # SentEval lower-cases STS12-16 and STSb, not SICK

    def __post_init__(self) -> None:
        if self.n_pairs <= 0 or not self.citation or not self.description:
            raise ValueError(f"task {self.name}: metadata incomplete")

    def load(self, root: Path, preprocess: str = "raw") -> PairSet:
        """Read and count-check the pairs under ``root``, in the text convention ``preprocess``."""
        from dsgen.data.hub import read_hub_task
        from dsgen.evaluation.preprocess import apply

        if (root / "mteb").is_dir():
            if self.hub_name is None:
                raise DsgenError(f"task {self.name} needs the local SICK files; set DSGEN_DATA_DIR")
            pairs = read_hub_task(root, self.hub_name)
        else:
            pairs = self.reader(root)
        if len(pairs) != self.n_pairs:
            raise DsgenError(f"task {self.name}: read {len(pairs)} pairs from {root / self.source}, expected {self.n_pairs}; "
                             "the data folder is incomplete or altered")
        return apply(preprocess, pairs, self.senteval_lowercase)


TASKS: Registry[StsTask] = Registry("task")

_SEMEVAL = {
    "sts12": (3108, "Agirre et al. (2012), SemEval-2012 Task 6: A Pilot on Semantic Textual Similarity"),
    "sts13": (1500, "Agirre et al. (2013), *SEM 2013 shared task: Semantic Textual Similarity"),
    "sts14": (3750, "Agirre et al. (2014), SemEval-2014 Task 10: Multilingual Semantic Textual Similarity"),
    "sts15": (3000, "Agirre et al. (2015), SemEval-2015 Task 2: Semantic Textual Similarity, English, Spanish and Pilot on Interpretability"),
    "sts16": (1186, "Agirre et al. (2016), SemEval-2016 Task 1: Semantic Textual Similarity, Monolingual and Cross-Lingual Evaluation"),
}
for _name, (_n, _cite) in _SEMEVAL.items():
    TASKS.add(_name, StsTask(_name, _name.upper(), f"SemEval {_name.upper()} test, all sets pooled", _name, _n, _cite,
                             (lambda root, y=_name: sts.read_semeval_year(root, y)), hub_name=_name))
TASKS.add("stsb", StsTask("stsb", "STSBenchmark", "STS benchmark test split", "stsbenchmark", 1379,
                          "Cer et al. (2017), SemEval-2017 Task 1: Semantic Textual Similarity",
                          lambda root: sts.read_stsb(root, "test"), hub_name="stsb"))
TASKS.add("sickr", StsTask("sickr", "SICK-R", "SICK relatedness, train + trial + test pooled (MTEB)", "sick", 9927,
                           "Marelli et al. (2014), A SICK cure for the evaluation of compositional distributional semantic models",
                           lambda root: sts.read_sick(root, ("train", "trial", "test")), hub_name="sickr",
                           senteval_lowercase=False))
TASKS.add("sickr-test", StsTask("sickr-test", None, "SICK relatedness, test split (SentEval, Sentence-BERT, DINO)", "sick",
                                4927, "Marelli et al. (2014), A SICK cure for the evaluation of compositional distributional semantic models",
                                lambda root: sts.read_sick(root, ("test",)), senteval_lowercase=False))

# DINO's Table 1 columns (the default of every table) and MTEB's seven English STS tasks.
DEFAULT_TASKS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr-test")
MTEB_TASKS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")


def parse_tasks(spec: str | None) -> list[str]:
    """``"sts12,stsb"`` -> names, checked against the registry (did-you-mean on typos)."""
    if not spec:
        return list(DEFAULT_TASKS)
    if spec == "mteb":
        return list(MTEB_TASKS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for n in names:
        TASKS.get(n)
    return names
