"""Data-level fits: what a stage fits on the data alone, made once per dataset and shared by every run that reads it.

A fit that depends only on data (RISE's SDI classifier, an unsupervised guide encoder, a labeller's scores of
the dataset) is an artefact of the dataset, like the dataset itself: it is keyed by what it reads
(:func:`dsgen.identity.data_fit_key`), made once by one task, stored by the driver under
``<out>/cache/fits/<kind>-<key>/`` and loaded by every run that needs it (every method and training seed that
reads that dataset), never refitted per run. Its randomness is the data's: it is seeded with the run's *data*
seed, so a comparison's training seeds share it and its spread shows in the data seeds' spread.

The contract of a stage that fits on data (all of it):

1. Mix in :class:`FitsOnData` (every labeller and reweighter does; a trainer may) and return a :class:`DataFit`
   from ``data_fit()``: its ``kind`` (names the artefact's folder), ``settings`` (the part of the stage's config
   the fit depends on: not, say, how scores become weights), ``reads`` (which data it fits on, among
   :data:`READS`), ``compute(data, folder)``, ``load(folder, info)`` and the ``models`` it loads.
2. The engine (:class:`dsgen.runs.pipeline.Runner`, whichever scheduler runs the comparison) keys it from the keys of
   what it reads (``generated``: the dataset's key and the postprocessing filters; ``inputs`` / ``source``:
   their texts' keys), the settings, its models' fingerprints and the data seed; when no complete fit of that
   key is stored it calls ``compute`` with a :class:`FitData` and an empty folder, in which ``compute`` writes
   the artefact's files and returns what a reader should know (JSON: accuracy, steps...). The folder is stored
   with ``fit.json`` (its key, what it read, that info, timings), written last: a folder without it is
   incomplete and made again.
3. Before the stage runs, the engine sets ``stage.fitted`` to a :class:`Fitted` (``value``: what ``load``
   returned, ``info``, ``key``). The stage reads ``self.fitted.value`` where it used to fit. A stage used alone,
   outside a run, may fit in place on what it is given (:meth:`FitsOnData.fit_alone`).

``compute`` and ``load`` run in whichever process the scheduler chose (this one, or a Ray worker that sends the
folder's files back to the driver), so they must not depend on anything but their arguments and the stage's
config; ``load`` must give the same object whether the folder was just written or copied from another machine.

Example (an unsupervised guide encoder trained on the method's inputs, MultiCSR's SimCSE guide)::

    class GuidedTrainer(Trainer, FitsOnData):
        def data_fit(self) -> DataFit:
            return DataFit("simcse-guide", settings={"encoder": self.config.guide, "epochs": 1}, reads=("inputs",),
                           compute=self.train_guide, load=self.load_guide, models=(self.config.guide,))

        def train_guide(self, data: FitData, folder: Path) -> dict:
            model = train_simcse(data.inputs, seed=data.seed)        # data.inputs: the x1 the data seed drew
            model.save(str(folder))
            return {"sentences": len(data.inputs)}

        def load_guide(self, folder: Path, info: dict) -> Any:
            return SentenceTransformer(str(folder), device="cpu")

        def train(self, train, validation, seed, progress=True):
            guide = self.fitted.value                                # made once per data seed, shared
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dsgen.data.pairs import Pair

READS = ("generated", "inputs", "source")
"""What a data-level fit may read (:class:`FitData`):

- ``generated``: the run's training dataset as generated, after the postprocessing filters that do not depend on
  the training seed (DINO's steps 1-3: pairs with x1 = x2, duplicates, more than ``max_per_x1_label`` x2 per
  (x1, y); :func:`seed_free_pairs`), in generation order. Not the random augmentation pairs, the label smoothing,
  the validation split or a label shuffle: those are the training seed's.
- ``inputs``: the human-written inputs x1 the data seed drew (None when x1 was generated too).
- ``source``: every distinct sentence of the source the inputs come from (RISE's human class).
"""

FIT_FILE = "fit.json"


@dataclass
class FitData:
    """What a data-level fit is computed from (only what its :class:`DataFit` ``reads``; the rest is None).

    Args:
        seed: the run's data seed: a data-level fit is seeded at the data level.
        generated: see :data:`READS`.
        inputs: see :data:`READS`.
        source: see :data:`READS`.
        device: the command line's device (cpu, cuda or auto).
        progress: show progress bars.
    """

    seed: int
    generated: list[Pair] | None = None
    inputs: list[str] | None = None
    source: list[str] | None = None
    device: str = "auto"
    progress: bool = True


@dataclass(frozen=True)
class DataFit:
    """A stage's declaration of its data-level fit (see the module docstring).

    Args:
        kind: names the artefact (``cache/fits/<kind>-<key>/``), e.g. ``sdi-classifier``.
        settings: the stage's settings the fit depends on (plain JSON values; they enter its key).
        reads: what it fits on, a subset of :data:`READS` (their keys enter its key).
        compute: ``(data, folder) -> info``: fit on ``data``, write the artefact's files into ``folder`` (empty),
            return JSON-able information for the result files.
        load: ``(folder, info) -> value``: the object the stage uses, read back from the folder.
        models: names of the models the fit loads (their fingerprints enter its key: an edited local model is
            a new fit).
        version: bumped when the fit's algorithm changes what it makes (a new key).
    """

    kind: str
    settings: dict[str, Any]
    reads: tuple[str, ...]
    compute: Callable[[FitData, Path], dict[str, Any]]
    load: Callable[[Path, dict[str, Any]], Any]
    models: tuple[str, ...] = ()
    version: int = 1

    def __post_init__(self) -> None:
        unknown = [r for r in self.reads if r not in READS]
        if unknown or not self.reads:
            raise ValueError(f"data fit {self.kind}: reads must be some of {', '.join(READS)} (got {self.reads})")


@dataclass
class Fitted:
    """A loaded data-level fit: what the stage uses (``value``), what ``compute`` said (``info``) and its key."""

    kind: str
    key: str
    value: Any
    info: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)  # fit.json: what it read, its seed, timings

    def summary(self) -> dict[str, Any]:
        """What a result file records of the fit it used (its key, seed, what it read, what making it cost)."""
        return {"kind": self.kind, "key": self.key, "seed": self.record.get("seed"), "reads": self.record.get("reads"),
                "fit_seconds": self.record.get("timings", {}).get("fit_seconds")}


class FitsOnData:
    """Mix-in of a stage that may declare a data-level fit (labellers and reweighters have it; see the module
    docstring). ``fitted`` is set by the engine before the stage runs."""

    fitted: Fitted | None = None

    def data_fit(self) -> DataFit | None:
        """The stage's data-level fit, or None (the default: it fits nothing on data alone)."""
        return None

    def fit_alone(self, data: FitData) -> Fitted:
        """Fit in a temporary folder and load it: a stage used outside a run (a unit test, a notebook), with no
        engine to share its fit. A run never comes here: its engine sets :attr:`fitted`."""
        fit = self.data_fit()
        if fit is None:
            raise ValueError(f"{type(self).__name__} declares no data-level fit")
        with tempfile.TemporaryDirectory(prefix="dsgen-fit-") as tmp:
            info = fit.compute(data, Path(tmp))
            return Fitted(fit.kind, "", fit.load(Path(tmp), info), info, {"seed": data.seed, "reads": list(fit.reads)})


def seed_free_pairs(pairs: list[Pair], postprocess: Any) -> list[Pair]:
    """The ``generated`` read of a data-level fit: ``pairs`` (a dataset as generated) after the postprocessing
    steps that do not depend on the training seed (:mod:`dsgen.data.postprocess` steps 1-3), in generation order,
    labels as generated. ``postprocess`` None (a method without postprocessing): every pair."""
    if postprocess is None:
        return list(pairs)
    from dsgen.data.postprocess import postprocess as run

    tagged = [Pair(p.text_a, p.text_b, p.label, p.weight, {**p.extra, "_position": i}) for i, p in enumerate(pairs)]
    filters_only = postprocess.replace(label_smoothing=0.0, random_pairs_per_x1=0, validation_fraction=0.0,
                                       shuffle_labels=False)
    kept, _ = run(tagged, filters_only)
    return [pairs[i] for i in sorted(p.extra["_position"] for p in kept)]


def filter_settings(postprocess: Any) -> dict[str, Any] | None:
    """The postprocessing settings :func:`seed_free_pairs` applies (they enter the key of a fit that reads
    ``generated``)."""
    if postprocess is None:
        return None
    return {k: getattr(postprocess, k) for k in ("remove_identical", "drop_containing", "remove_duplicates",
                                                  "max_per_x1_label")}


_LOADED: "OrderedDict[str, Fitted]" = OrderedDict()  # the latest loaded fits of this process (runs share one)
KEEP_LOADED = 2


class FitStore:
    """The ``cache/fits/`` folder of an output folder: one sub-folder per fit, complete when its ``fit.json``
    names its key. Only the driver writes here (a Ray worker makes a fit in a folder of its own, whose files the
    driver writes, ``fit.json`` last)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, kind: str, key: str) -> Path:
        return self.root / f"{kind}-{key}"

    def complete(self, kind: str, key: str) -> bool:
        """Whether a whole fit of this key is stored (its ``fit.json``, written last, names the key)."""
        from dsgen.artifacts import read_json
        from dsgen.errors import DsgenError

        record = self.folder(kind, key) / FIT_FILE
        try:
            return record.exists() and read_json(record).get("key") == key
        except DsgenError:
            return False

    def make(self, fit: DataFit, key: str, data: FitData, record: dict[str, Any]) -> dict[str, Any]:
        """Compute the fit into a temporary folder beside its place, write ``fit.json`` (``record`` with the
        info, key and timings) and move the folder into place; returns the ``fit.json`` written."""
        from dsgen.artifacts import ensure_writable_dir, package_versions, staging_dir, write_json

        ensure_writable_dir(self.root)
        target = self.folder(fit.kind, key)
        tmp = staging_dir(self.root, f".{target.name}.", ".tmp")  # the mode mkdir gives, not mkdtemp's 0700
        try:
            started = time.perf_counter()
            info = fit.compute(data, tmp)
            done = {**record, "kind": fit.kind, "key": key, "info": info,
                    "timings": {"fit_seconds": round(time.perf_counter() - started, 2)}, "versions": package_versions()}
            write_json(tmp / FIT_FILE, done)
            if target.exists():  # an incomplete folder left by an interrupted write
                shutil.rmtree(target)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _LOADED.pop(key, None)
        return done

    def load(self, fit: DataFit, key: str) -> Fitted:
        """The stored fit, loaded (once per process for the latest few: the runs of a data seed share it)."""
        from dsgen.artifacts import read_json

        if key in _LOADED:
            _LOADED.move_to_end(key)
            return _LOADED[key]
        folder = self.folder(fit.kind, key)
        record = read_json(folder / FIT_FILE)
        fitted = Fitted(fit.kind, key, fit.load(folder, record.get("info", {})), record.get("info", {}), record)
        _LOADED[key] = fitted
        while len(_LOADED) > KEEP_LOADED:
            _LOADED.popitem(last=False)
        return fitted
