"""Committed reference scores and the regression check behind ``dsgen regress``.

A baseline file (``results/baseline/<preset>.json``) holds, per method, the mean Spearman x100
per task over the preset's seeds, and the tolerance chosen for that preset from its measured
seed spread. The check fails when any task of any method falls more than the tolerance below its
baseline, or is not a number; improvements never fail it.

Scores are kept **per kind of machine** (``made_with``: the evaluation dtype the runs used and the
CPU capability they ran on). Generation rounds differently on AVX2 and AVX-512 CPUs, so the same
seed gives another dataset there, and a preset that asks for bfloat16 evaluation gets it only where
bfloat16 is native (AVX-512, a GPU) and float32 elsewhere. A rerun is checked against the scores
made the same way; ``--update`` writes (or replaces) the entry of the machine it runs on and keeps
the others, so one file serves every machine CI can land on (an AVX2 entry can be made on a larger
CPU with ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2``). Where no entry was made the
same way, the check uses the first one and says so: the tolerance was not chosen for that gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.artifacts import package_versions, read_json, write_json
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result

BASELINE_SCHEMA = 2  # 1: one set of scores with its ``made_with`` beside it (still read)
DEFAULT_TOLERANCE = 1.0


def baseline_scores(results: dict[str, list[Result]]) -> dict[str, dict[str, float]]:
    """Mean Spearman per method and task over the given seeds."""
    out = {}
    for m, rs in results.items():
        tasks = rs[0].tasks.keys()
        out[m] = {t: round(sum(r.tasks[t].spearman for r in rs) / len(rs), 4) for t in tasks}
    return out


def made_with(results: dict[str, list[Result]]) -> dict[str, Any]:
    """How the runs were made: the evaluation dtype(s) their plans used and this machine's CPU capability."""
    import torch

    dtypes = sorted({r.extra.get("evaluation_data", {}).get("dtype") or "float32" for rs in results.values() for r in rs})
    return {"eval_dtype": dtypes[0] if len(dtypes) == 1 else dtypes, "cpu": torch.backends.cpu.get_cpu_capability()}


def describe(how: dict[str, Any] | None) -> str:
    return f"{how.get('eval_dtype')} evaluation on {how.get('cpu')}" if how else "an unrecorded machine"


def write_baseline(path: str | Path, preset: str, seeds: list[int], results: dict[str, list[Result]],
                   tolerance: float = DEFAULT_TOLERANCE, note: str = "",
                   previous: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Write the scores of ``results`` as the entry of the machine kind they were made on, keeping the
    entries ``previous`` holds for other kinds (same preset and seeds only). Returns the kept ones."""
    how = made_with(results)
    kept = [b for b in (previous or {}).get("baselines", [])
            if b.get("made_with") != how and previous.get("preset") == preset and previous.get("seeds") == seeds]
    entry = {"made_with": how, "scores": baseline_scores(results), "versions": package_versions()}
    write_json(path, {"schema_version": BASELINE_SCHEMA, "preset": preset, "seeds": seeds, "tolerance": tolerance,
                      "note": note, "baselines": [entry, *kept]})
    return kept


def select(baseline: dict[str, Any], results: dict[str, list[Result]]) -> tuple[dict[str, Any], str]:
    """The entry of ``baseline`` made the way ``results`` were, and a line when there is none (then the
    first entry, which the check uses with the tolerance as it is)."""
    how = made_with(results)
    for entry in baseline["baselines"]:
        if entry.get("made_with") == how:
            return entry, ""
    entry = baseline["baselines"][0]
    return entry, (f"no baseline was made like this rerun ({describe(how)}); checked against the one made with "
                   f"{describe(entry.get('made_with'))}, for which the tolerance was not chosen (add this machine's "
                   "with `dsgen regress --update` on it)")


def _check_scores(what: str, scores: Any) -> None:
    if not isinstance(scores, dict) or not scores:
        raise DsgenError(f"{what}: 'scores' is missing or not a dict")
    for method, tasks in scores.items():
        if not isinstance(tasks, dict) or not tasks:
            raise DsgenError(f"{what}: scores of '{method}' must map tasks to numbers")
        for task, value in tasks.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise DsgenError(f"{what}: score of '{method}' on '{task}' is not a finite number ({value!r})")


def read_baseline(path: str | Path) -> dict[str, Any]:
    """A baseline file, checked field by field: a malformed one is a one-line error, not a traceback.
    A schema-1 file (one set of scores) is read as one entry."""
    path = Path(path)
    if not path.exists():
        raise DsgenError(f"baseline {path} not found; create it with `dsgen regress --update`")
    data = read_json(path)
    what = f"{path}: not a dsgen baseline file (schema {BASELINE_SCHEMA})"
    if not isinstance(data, dict) or data.get("schema_version") not in (1, BASELINE_SCHEMA):
        raise DsgenError(what)
    for key, kind in (("preset", str), ("seeds", list)):
        if not isinstance(data.get(key), kind):
            raise DsgenError(f"{what}: '{key}' is missing or not a {kind.__name__}")
    if data["schema_version"] == 1:
        data = {**{k: v for k, v in data.items() if k not in ("scores", "made_with", "versions")},
                "schema_version": BASELINE_SCHEMA,
                "baselines": [{"made_with": data.get("made_with"), "scores": data.get("scores"),
                               "versions": data.get("versions", {})}]}
    if not data["seeds"] or not all(isinstance(s, int) for s in data["seeds"]):
        raise DsgenError(f"{what}: 'seeds' must be a non-empty list of integers")
    tol = data.get("tolerance", DEFAULT_TOLERANCE)
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol < 0:
        raise DsgenError(f"{what}: 'tolerance' must be a non-negative number")
    if not isinstance(data.get("baselines"), list) or not data["baselines"]:
        raise DsgenError(f"{what}: 'baselines' is missing or empty")
    for entry in data["baselines"]:
        if not isinstance(entry, dict):
            raise DsgenError(f"{what}: every baseline must be an object")
        _check_scores(what, entry.get("scores"))
    return data


@dataclass
class Check:
    method: str
    task: str
    baseline: float
    current: float
    tolerance: float

    @property
    def delta(self) -> float:
        return self.current - self.baseline

    @property
    def failed(self) -> bool:
        """Below the tolerance, or not a number at all (a NaN never passes)."""
        return not math.isfinite(self.current) or self.delta < -self.tolerance

    @property
    def status(self) -> str:
        if not math.isfinite(self.current):
            return "NOT A NUMBER"
        return "REGRESSED" if self.failed else "ok"


def check(entry: dict[str, Any], results: dict[str, list[Result]], tolerance: float) -> list[Check]:
    """One :class:`Check` per (method, task) of a baseline entry (:func:`select`); a missing task is an error."""
    current = baseline_scores(results)
    checks = []
    for m, tasks in entry["scores"].items():
        if m not in current:
            raise DsgenError(f"baseline has method '{m}' but the rerun did not produce it")
        for t, v in tasks.items():
            if t not in current[m]:
                raise DsgenError(f"baseline has task '{t}' for '{m}' but the rerun did not evaluate it")
            checks.append(Check(m, t, float(v), current[m][t], tolerance))
    return checks
