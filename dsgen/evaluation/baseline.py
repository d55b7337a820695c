"""Committed reference scores and the regression check behind ``dsgen regress``.

A baseline file (``results/baseline/<preset>.json``) holds, per method, the mean Spearman x100
per task over the preset's seeds. The check fails when any task of any method falls more than
``tolerance`` points below its baseline; improvements never fail it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.artifacts import package_versions, read_json, write_json
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result

BASELINE_SCHEMA = 1


def baseline_scores(results: dict[str, list[Result]]) -> dict[str, dict[str, float]]:
    """Mean Spearman per method and task over the given seeds."""
    out = {}
    for m, rs in results.items():
        tasks = rs[0].tasks.keys()
        out[m] = {t: round(sum(r.tasks[t].spearman for r in rs) / len(rs), 4) for t in tasks}
    return out


def write_baseline(path: str | Path, preset: str, seeds: list[int], results: dict[str, list[Result]],
                   note: str = "") -> None:
    write_json(path, {"schema_version": BASELINE_SCHEMA, "preset": preset, "seeds": seeds,
                      "scores": baseline_scores(results), "note": note, "versions": package_versions()})


def read_baseline(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise DsgenError(f"baseline {path} not found; create it with `dsgen regress --update`")
    data = read_json(path)
    if not isinstance(data, dict) or data.get("schema_version") != BASELINE_SCHEMA or "scores" not in data:
        raise DsgenError(f"{path}: not a dsgen baseline file (schema {BASELINE_SCHEMA})")
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
        return self.delta < -self.tolerance


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
