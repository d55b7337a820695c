"""A comparison of methods over runs, built from result files: scores, and the difference of each
method to a reference with intervals over (data seed, training seed) runs (headline, nested) and
over test pairs (secondary).

The statistics live in :mod:`dsgen.evaluation.statistics`; rendering (Markdown, rich, CSV, PNG)
in :mod:`dsgen.reports.tables`. This module only assembles the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsgen.errors import DsgenError
from dsgen.evaluation.results import STAGE_TIMINGS, Result
from dsgen.evaluation.statistics import Interval, nested_interval, paired_bootstraps, percentile_interval

NEAR_CONSTANT_SD = 0.05
"""A trained method whose average score varies by less than this between training seeds on one dataset (sample
sd, Spearman x 100) gives nearly the same model from every training seed: its seeds are not independent
replicates, and the table's notes say so. 0.05 is a seventh of the smallest training-seed spread of a method that
trains on ``cpu`` (0.36, syncse-partial; DINO 0.71, human 0.42) and five times syncse-scratch's 0.01 (its
triplets fit one batch, seen three times)."""


@dataclass
class Comparison:
    """Methods x tasks: per-run scores, means, stds and differences to ``methods[0]``.

    Args:
        methods: compared methods, the reference first.
        tasks: task names (columns).
        results: per method, one result per (data seed, training seed) run (the same runs for every
            method; differences are paired by run).
        preset: preset name, for titles.
        n_boot: resamples of the test-pair bootstrap.
        failures: ``dsgen.runs.records.RunFailed`` of runs that produced no model (a method with any failed run is not
            compared: it is shown as failed, never with a score).

    A result whose training log does not show that it trained (:meth:`Result.training_failure`) is refused: such a
    run is a failure (``dsgen.runs`` raises it as one), never a score.
    """

    methods: list[str]
    tasks: list[str]
    results: dict[str, list[Result]]
    preset: str = ""
    n_boot: int = 1000
    failures: list[Any] | None = None
    seed_diffs: dict[str, dict[str, Interval]] = field(default_factory=dict, init=False)
    pair_diffs: dict[str, dict[str, Interval]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        import numpy as np

        def order(r: Result) -> tuple[int, int]:
            return tuple(-1 if x is None else x for x in r.run)  # type: ignore[return-value]

        from dsgen.runs.records import run_text

        for m in self.methods:
            self.results[m] = sorted(self.results[m], key=order)
            for r in self.results[m]:
                failure = r.training_failure()
                if failure is not None:
                    raise DsgenError(f"'{m}' ({run_text(r.run)}) is not a trained model's result: {failure}")
        self._check_same_pairs()
        ref = self.methods[0]
        ref_runs = [r.run for r in self.results[ref]]
        for m in self.methods[1:]:
            if [r.run for r in self.results[m]] != ref_runs:
                raise DsgenError(f"'{m}' and '{ref}' were run with different (data seed, training seed) runs; "
                                 "compare them over the same runs")
            self.seed_diffs[m] = {t: nested_interval(self.run_scores(ref, t), self.run_scores(m, t)) for t in self.tasks}
            self.seed_diffs[m]["avg"] = nested_interval(self.run_scores(ref), self.run_scores(m))
        ref_pred = [r.predictions for r in self.results[ref]]
        paired = [m for m in self.methods[1:]
                  if all(p is not None for p in ref_pred + [r.predictions for r in self.results[m]])]
        if not paired:
            return
        # every method against the reference on each task's resamples (one seed per task): the reference's ranks and
        # the gold's computed once for all of them
        by_task = {}
        for i, t in enumerate(self.tasks):
            others = {m: [r.predictions[t] for r in self.results[m]] for m in paired}
            by_task[t] = paired_bootstraps([p[t] for p in ref_pred], others, ref_pred[0][f"{t}:gold"], self.n_boot, seed=i)
        for m in paired:
            samples = {t: by_task[t][m] for t in self.tasks}
            self.pair_diffs[m] = {t: percentile_interval(self.score(m, t) - self.score(ref, t), samples[t], n_boot=self.n_boot)
                                  for t in self.tasks}
            self.pair_diffs[m]["avg"] = percentile_interval(self.average(m) - self.average(ref),
                                                            np.mean([samples[t] for t in self.tasks], axis=0),
                                                            n_boot=self.n_boot)

    def _check_same_pairs(self) -> None:
        """Every compared result must be scored on the same test pairs (same gold scores, same order)."""
        import numpy as np

        first: dict[str, Any] = {}
        for m in self.methods:
            for r in self.results[m]:
                if r.predictions is None:
                    continue
                for t in self.tasks:
                    gold = np.asarray(r.predictions[f"{t}:gold"])
                    if t not in first:
                        first[t] = gold
                    elif first[t].shape != gold.shape or not np.array_equal(first[t], gold):
                        raise DsgenError(f"'{m}' (seed {r.seed}) was scored on other {t} pairs than the rest; "
                                         "compare results of the same evaluation data")

    # -- numbers ---------------------------------------------------------------------------------
    def seed_scores(self, method: str, task: str | None = None) -> list[float]:
        """Scores of every run, in run order (the task's, or the average's)."""
        rs = self.results[method]
        return [r.average if task is None else r.tasks[task].spearman for r in rs]

    def run_scores(self, method: str, task: str | None = None) -> dict[tuple[int, int], float]:
        """(data seed, training seed) -> score (the task's, or the average's)."""
        return {r.run: (r.average if task is None else r.tasks[task].spearman) for r in self.results[method]}  # type: ignore[misc]

    def score(self, method: str, task: str) -> float:
        import numpy as np

        return float(np.mean(self.seed_scores(method, task)))

    def average(self, method: str) -> float:
        import numpy as np

        return float(np.mean(self.seed_scores(method)))

    @property
    def seeds(self) -> list[int]:
        """Training seeds of the runs."""
        return sorted({r.seed for rs in self.results.values() for r in rs if r.seed is not None})

    @property
    def data_seeds(self) -> list[int]:
        return sorted({r.run[0] for rs in self.results.values() for r in rs if r.run[0] is not None})

    @property
    def runs(self) -> list[tuple[int, int]]:
        return sorted({r.run for rs in self.results.values() for r in rs if r.seed is not None})  # type: ignore[misc]

    def encoders(self) -> list[str]:
        """The encoders of the compared runs, each as ``alias (spec)`` when it is a causal-LM encoder."""
        from dsgen.models import describe_encoder

        return sorted({describe_encoder(r.model) for rs in self.results.values() for r in rs})

    def stage_seconds(self) -> dict[str, dict[str, float]]:
        """Seconds per stage summed over each method's runs, as recorded in the result files
        (:meth:`Result.stage_seconds`); the last row makes each distinct dataset and data-level fit once
        (:meth:`Result.made`)."""
        out: dict[str, dict[str, float]] = {}
        made: dict[str, dict[str, float]] = {"datasets": {}, "fits": {}}
        for m in self.methods:
            row = {s: 0.0 for s in STAGE_TIMINGS}
            for r in self.results[m]:
                for s, v in r.stage_seconds().items():
                    row[s] += v
                for kind, keyed in r.made().items():
                    made[kind].update(keyed)
            out[m] = {k: round(v, 1) for k, v in row.items()}
        out["(each dataset and fit once)"] = {"generate": round(sum(made["datasets"].values()), 1),
                                              "fit": round(sum(made["fits"].values()), 1)}
        return out

    def spread(self) -> dict[str, dict[str, float]]:
        """Per method, the spread of its average score by source (:func:`dsgen.evaluation.statistics.variance_components`):
        between data seeds and between training seeds on one dataset; methods whose runs do not vary at all
        (``base``) are left out of this table and named by :meth:`replicate_notes`."""
        from dsgen.evaluation.statistics import variance_components

        out = {}
        for m in self.methods:
            scores = self.run_scores(m)
            if len(set(scores.values())) > 1:
                out[m] = {k: round(v, 3) if isinstance(v, float) else v for k, v in variance_components(scores).items()}
        return out

    def replicate_notes(self) -> dict[str, str]:
        """Methods whose runs are not independent replicates, each with why (the table's notes): a method that
        trains nothing by design (``base``: every run scores the same model), and a trained method whose average
        varies by less than :data:`NEAR_CONSTANT_SD` between training seeds on one dataset (pooled ``train_sd``)."""
        from dsgen.evaluation.statistics import variance_components

        notes = {}
        for m in self.methods:
            rs = self.results[m]
            if rs and all(r.untrained for r in rs):
                notes[m] = ("no training: every run scores the same model, so its runs are not independent "
                            "replicates (its spread is 0 by construction)")
                continue
            sd = variance_components(self.run_scores(m))["train_sd"] if len(rs) > 1 else float("nan")
            if sd == sd and sd < NEAR_CONSTANT_SD:
                notes[m] = (f"its average varies by {sd:.2f} (sample sd) between training seeds on one dataset, less "
                            f"than {NEAR_CONSTANT_SD}: its training seeds give (nearly) the same model, so they are not "
                            "independent replicates and an interval over its runs says nothing of another training")
        return notes

    def failed(self) -> dict[str, list[Any]]:
        """Per method that is not compared because a run of it failed, those runs' failures (``RunFailed``), in
        the order they came."""
        out: dict[str, list[Any]] = {}
        for f in self.failures or []:
            if f.method not in self.methods:
                out.setdefault(f.method, []).append(f)
        return out

    def quality(self) -> dict[str, dict[str, float | None]]:
        """Label agreement with the independent judge (:mod:`dsgen.evaluation.quality`), mean over seeds."""
        import numpy as np

        out = {}
        for m in self.methods:
            q = [r.extra.get("data_quality", {}) for r in self.results[m]]
            vals = {k: [x[k] for x in q if x.get(k) is not None] for k in ("spearman", "spearman_generated", "pairs")}
            if any(vals.values()):
                out[m] = {k: (round(float(np.mean(v)), 2) if v else None) for k, v in vals.items()}
        return out

    def frame(self) -> Any:
        """Numeric DataFrame: mean and std per task and the average, Δ with both intervals, seeds."""
        import numpy as np
        import pandas as pd

        from dsgen.reports.tables import TASK_LABELS

        rows = {}
        nan = float("nan")
        for m in self.methods:
            row: dict[str, float] = {}
            for t in [*self.tasks, None]:
                vals = self.seed_scores(m, t)
                name = TASK_LABELS.get(t, t) if t else "Avg."
                row[f"{name} mean"] = float(np.mean(vals))
                row[f"{name} std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
            s = self.seed_diffs.get(m, {}).get("avg")
            p = self.pair_diffs.get(m, {}).get("avg")
            row["Δ Avg."] = s.point if s else 0.0
            row["Δ seeds low"], row["Δ seeds high"] = (s.low if s and s.low is not None else nan,
                                                       s.high if s and s.high is not None else nan)
            row["Δ pairs low"], row["Δ pairs high"] = (p.low, p.high) if p else (nan, nan)
            row["runs"] = len(self.results[m])
            row["failed runs"] = 0
            rows[m] = row
        columns = list(next(iter(rows.values())))  # the reference's row is always there
        for m, fs in self.failed().items():  # no score: every number missing, the failed runs counted
            rows[m] = {**dict.fromkeys(columns, nan), "runs": 0, "failed runs": len(fs)}
        frame = pd.DataFrame.from_dict(rows, orient="index")
        frame.index.name = "method"
        return frame.round(3)

    def long_frame(self) -> Any:
        """The tidy table people load into pandas: one row per (method, variant, data seed, training seed,
        task, metric), with the plan's key fields as columns."""
        import pandas as pd

        rows = []
        for m in self.methods:
            for r in self.results[m]:
                plan = r.extra.get("plan", {})
                trainer = plan.get("trainer") or {}
                generation = plan.get("generation") or {}
                keys = {"method": m, "variant": r.extra.get("variant"), "data_seed": r.run[0], "seed": r.seed,
                        "preset": r.preset, "encoder": plan.get("encoder", r.model), "inputs": plan.get("inputs"),
                        "max_inputs": plan.get("max_inputs"), "generator": generation.get("generator"),
                        "reweighter": (plan.get("method") or {}).get("reweighter"),
                        "trainer": (plan.get("method") or {}).get("trainer"), "learning_rate": trainer.get("learning_rate"),
                        "epochs": trainer.get("epochs"), "eval_dtype": (plan.get("evaluation") or {}).get("dtype"),
                        "run_key": r.extra.get("run_key"), "dsgen_version": r.versions.get("dsgen"),
                        "git_commit": r.versions.get("dsgen_git_commit"), "git_dirty": r.versions.get("dsgen_git_dirty")}
                for task, score in r.tasks.items():
                    for metric, value in vars(score).items():
                        if metric != "n_pairs" and value is not None:
                            rows.append({**keys, "task": task, "metric": metric, "value": value})
                rows.append({**keys, "task": "avg", "metric": "spearman", "value": r.average})
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """Everything a claims report needs, as plain data."""
        return {"methods": self.methods, "tasks": self.tasks, "preset": self.preset, "seeds": self.seeds,
                "data_seeds": self.data_seeds, "runs": [list(r) for r in self.runs],
                "n_boot": self.n_boot,
                "scores": {m: {t: self.score(m, t) for t in self.tasks} | {"avg": self.average(m)} for m in self.methods},
                "seed_diffs": {m: {t: i.to_dict() for t, i in d.items()} for m, d in self.seed_diffs.items()},
                "pair_diffs": {m: {t: i.to_dict() for t, i in d.items()} for m, d in self.pair_diffs.items()}}
