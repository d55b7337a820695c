"""Committed reference scores and the regression check behind ``dsgen regress``.

A baseline file (``results/baseline/<preset>.json``) holds, per method, the mean Spearman x100
per task over the preset's seeds, and the tolerance chosen for that preset from its measured
seed spread. The check fails when any task of any method falls more than the tolerance below its
baseline, or is not a number; improvements never fail it.

A baseline also records how it was made (``made_with``): the evaluation dtype its runs used and
the CPU capability they ran on. A preset that asks for bfloat16 evaluation gets it only where
bfloat16 is native (AVX-512, a GPU) and float32 elsewhere, and generation rounds differently on
AVX2 and AVX-512 CPUs; the check says when a rerun was made differently. The committed tolerance
covers both: the ``smoke`` baseline's reruns on AVX-512 (bfloat16) and on AVX2 kernels (float32)
were within 0.06 of it (``results/benchmarks.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.artifacts import package_versions, read_json, write_json
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result

BASELINE_SCHEMA = 1
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


def write_baseline(path: str | Path, preset: str, seeds: list[int], results: dict[str, list[Result]],
                   tolerance: float = DEFAULT_TOLERANCE, note: str = "") -> None:
    write_json(path, {"schema_version": BASELINE_SCHEMA, "preset": preset, "seeds": seeds, "tolerance": tolerance,
                      "scores": baseline_scores(results), "note": note, "made_with": made_with(results),
                      "versions": package_versions()})


def differences(baseline: dict[str, Any], results: dict[str, list[Result]]) -> str:
    """A line saying how this rerun was made differently from the baseline ("" when it was not)."""
    then, now = baseline.get("made_with"), made_with(results)
    if not then:
        return f"the baseline does not record how it was made; this rerun: {now['eval_dtype']} evaluation on {now['cpu']}"
    changed = [f"{k.replace('_', ' ')} {then.get(k)} -> {now[k]}" for k in ("eval_dtype", "cpu") if then.get(k) != now[k]]
    return ("made differently from the baseline (" + ", ".join(changed) + "); the tolerance covers that") if changed else ""


def read_baseline(path: str | Path) -> dict[str, Any]:
    """A baseline file, checked field by field: a malformed one is a one-line error, not a traceback."""
    path = Path(path)
    if not path.exists():
        raise DsgenError(f"baseline {path} not found; create it with `dsgen regress --update`")
    data = read_json(path)
    what = f"{path}: not a dsgen baseline file (schema {BASELINE_SCHEMA})"
    if not isinstance(data, dict) or data.get("schema_version") != BASELINE_SCHEMA:
        raise DsgenError(what)
    for key, kind in (("preset", str), ("seeds", list), ("scores", dict)):
        if not isinstance(data.get(key), kind):
            raise DsgenError(f"{what}: '{key}' is missing or not a {kind.__name__}")
    if not data["seeds"] or not all(isinstance(s, int) for s in data["seeds"]):
        raise DsgenError(f"{what}: 'seeds' must be a non-empty list of integers")
    tol = data.get("tolerance", DEFAULT_TOLERANCE)
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol < 0:
        raise DsgenError(f"{what}: 'tolerance' must be a non-negative number")
    for method, tasks in data["scores"].items():
        if not isinstance(tasks, dict) or not tasks:
            raise DsgenError(f"{what}: scores of '{method}' must map tasks to numbers")
        for task, value in tasks.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise DsgenError(f"{what}: score of '{method}' on '{task}' is not a finite number ({value!r})")
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


def check(baseline: dict[str, Any], results: dict[str, list[Result]], tolerance: float) -> list[Check]:
    """One :class:`Check` per (method, task) of the baseline; a missing task is an error."""
    current = baseline_scores(results)
    checks = []
    for m, tasks in baseline["scores"].items():
        if m not in current:
            raise DsgenError(f"baseline has method '{m}' but the rerun did not produce it")
        for t, v in tasks.items():
            if t not in current[m]:
                raise DsgenError(f"baseline has task '{t}' for '{m}' but the rerun did not evaluate it")
            checks.append(Check(m, t, float(v), current[m][t], tolerance))
    return checks
