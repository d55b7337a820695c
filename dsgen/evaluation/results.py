"""Result files: one JSON per evaluated model (or per method, preset and seed), with a schema version.

Tables are always built from these files, never from memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import package_versions, read_json, write_json
from dsgen.errors import DsgenError

SCHEMA_VERSION = 1

# A run's stages and the timings (``<stage>_seconds`` keys of a result file) each one sums: ``generate`` is what the
# run spent getting its datasets (reading a cached one costs little), ``data quality`` dsgen's own label-agreement
# diagnostic (comparison tables), not a method's stage. ``label``, ``reweight`` and ``train`` include getting their
# data-level fit (``data_fit_seconds``: making it, where the run made it, else loading it).
STAGE_TIMINGS = {"generate": ("generate_seconds",), "postprocess": ("postprocess_seconds",),
                 "label": ("label_seconds",), "reweight": ("reweight_seconds",),
                 "train": ("train_seconds",), "data quality": ("data_quality_seconds",),
                 "evaluate": ("evaluate_seconds",)}


def score_failure(tasks: dict[str, "TaskScore"]) -> str | None:
    """Why an evaluation gave no score (one line): a task whose Spearman or Pearson is not a finite number (a diverged
    encoder's embeddings, a constant one's cosines); None when every score is finite."""
    for name, score in tasks.items():
        for stat in ("spearman", "pearson"):
            value = getattr(score, stat)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                return (f"its evaluation scored no finite number on {name} ({stat} {value}): the encoder's embeddings "
                        "are not finite or constant; a diverged run (lower the learning rate) or a broken encoder")
    return None


def nonfinite_failure(result: "Result") -> str | None:
    """Why ``result`` cannot be written (one line): a non-finite number anywhere in it (JSON has none); None when
    it can."""
    from dsgen.artifacts import nonfinite_fields

    found = nonfinite_fields({k: v for k, v in result.to_dict().items() if k != "average"})
    if not found:
        return None
    return f"not finite: {', '.join(found[:3])}{' and more' if len(found) > 3 else ''}; a diverged run, never a score"


def predictions_path(path: Path) -> Path:
    return path.with_suffix(".pred.npz")


@dataclass
class TaskScore:
    """Spearman and Pearson x 100 of cosine similarity against gold (the score), and, as MTEB reports
    them beside it, of negative Euclidean and Manhattan distance (None in results made before)."""

    spearman: float
    pearson: float
    n_pairs: int
    euclidean_spearman: float | None = None
    euclidean_pearson: float | None = None
    manhattan_spearman: float | None = None
    manhattan_pearson: float | None = None


@dataclass
class Result:
    """Scores of one encoder on a set of STS tasks.

    Example:
        >>> r = Result(model="m", tasks={"stsb": TaskScore(80.0, 81.0, 1379)})
        >>> r.average
        80.0
    """

    model: str
    tasks: dict[str, TaskScore]
    method: str | None = None
    preset: str | None = None
    seed: int | None = None
    data_seed: int | None = None  # the run's generation seed (None: no generated data, or the training seed's own)
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=package_versions)
    schema_version: int = SCHEMA_VERSION
    predictions: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    source: Path | None = field(default=None, repr=False, compare=False)  # the file it was loaded from

    def __post_init__(self) -> None:
        # Predictions are stored as float32; holding them so in memory makes a fresh result equal to
        # the same result read back (same-pairs check, bootstrap intervals of a rerun from cache).
        if self.predictions:
            import numpy as np

            self.predictions = {k: np.asarray(v, dtype=np.float32) for k, v in self.predictions.items()}

    @property
    def run(self) -> tuple[int | None, int | None]:
        """(data seed, training seed) of the run; a result without a data seed generated its own data
        with its training seed (or none at all)."""
        return (self.seed if self.data_seed is None else self.data_seed, self.seed)

    @property
    def untrained(self) -> bool:
        """Whether the run's plan trains no encoder (``base``): it scores a given model, the same for every run.
        False for a trained run and for a result that does not say (``dsgen eval``)."""
        plan = self.extra.get("plan")
        return isinstance(plan, dict) and "trainer" in plan and plan["trainer"] is None

    def training_failure(self) -> str | None:
        """Why this result is not a score: for a run whose plan trains an encoder, its training log judged by
        :func:`dsgen.training.fit.training_failure` (the rule the runner applies); for any result, a score that is
        not finite (:func:`score_failure`: a file written before dsgen refused them). None for a run that trained
        and scored, and for a result without training (``base``, ``dsgen eval``) with finite scores."""
        plan = self.extra.get("plan")
        if "training" in self.extra or (isinstance(plan, dict) and plan.get("trainer")):
            from dsgen.training.fit import training_failure

            failure = training_failure(self.extra.get("training"))
            if failure is not None:
                return failure
        return score_failure(self.tasks)

    def stage_seconds(self) -> dict[str, float]:
        """What this run's own stages cost (:data:`STAGE_TIMINGS`), from its timings; a cached dataset or fit it
        read costs it nothing here (:meth:`made` says what making them cost)."""
        return {stage: math.fsum(float(self.timings.get(k, 0.0)) for k in keys) for stage, keys in STAGE_TIMINGS.items()}

    def made(self) -> dict[str, dict[str, float]]:
        """What making the data-level artefacts this run read cost, by key, however often they are read: ``datasets``
        (its generated datasets: train, with RISE's dev and DINO-x1x2's x1, under one key) and ``fits`` (data-level
        fits such as RISE's SDI classifier). Summing these over runs by key counts each artefact once."""
        datasets, fits = {}, {}
        if self.extra.get("dataset_key"):
            key = "+".join(str(self.extra[k]) for k in ("dataset_key", "dev_dataset_key") if self.extra.get(k))
            datasets[key] = float(self.timings.get("dataset_generate_seconds", 0.0))
        for fit in (self.extra.get("data_fits") or {}).values():
            fits[str(fit.get("key"))] = float(fit.get("fit_seconds") or 0.0)
        return {"datasets": datasets, "fits": fits}

    @property
    def average(self) -> float:
        return round(sum(t.spearman for t in self.tasks.values()) / len(self.tasks), 4) if self.tasks else float("nan")

    def to_dict(self) -> dict[str, Any]:
        average = self.average
        return {"schema_version": self.schema_version, "model": self.model, "method": self.method,
                "preset": self.preset, "seed": self.seed, "data_seed": self.data_seed,
                "tasks": {k: vars(v) for k, v in self.tasks.items()},
                "average": average if math.isfinite(average) else None,  # no tasks: no average (JSON has no NaN)
                "timings": self.timings, "extra": self.extra, "versions": self.versions}

    def save(self, path: str | Path) -> Path:
        """Write the JSON and, when the result carries them, its per-pair predictions beside it."""
        path = Path(path)
        if self.predictions:
            import io

            import numpy as np

            from dsgen.artifacts import atomic_open

            buf = io.BytesIO()
            np.savez_compressed(buf, **self.predictions)
            with atomic_open(predictions_path(path), "wb") as fh:
                fh.write(buf.getvalue())
        write_json(path, self.to_dict())
        return path

    @staticmethod
    def load_predictions(path: str | Path) -> dict[str, Any] | None:
        """``{"<task>": cosine per pair, "<task>:gold": gold scores}`` saved beside a result, if any."""
        import numpy as np

        target = predictions_path(Path(path))
        if not target.exists():
            return None
        with np.load(target) as data:
            return {k: data[k] for k in data.files}

    @classmethod
    def load(cls, path: str | Path) -> "Result":
        """The result in the file ``path`` (remembered as :attr:`source`, so that what reads it can look beside it)."""
        data = read_json(path)
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise DsgenError(f"{path}: not a dsgen result file of schema version {SCHEMA_VERSION}")
        try:
            tasks = {k: TaskScore(**v) for k, v in data["tasks"].items()}
        except (KeyError, TypeError):
            raise DsgenError(f"{path}: malformed 'tasks' entry") from None
        result = cls(model=data["model"], tasks=tasks, method=data.get("method"), preset=data.get("preset"),
                     seed=data.get("seed"), data_seed=data.get("data_seed"), timings=data.get("timings", {}),
                     extra=data.get("extra", {}), versions=data.get("versions", {}))
        result.source = Path(path)
        return result
