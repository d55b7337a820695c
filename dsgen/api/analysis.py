"""``dsgen.analyze``: RISE's Table 1 for one run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import records_call
from dsgen.api.common import publish as publish_tables  # ``publish`` is also an argument's name
from dsgen.errors import DsgenError


@dataclass
class Analysis:
    """What :func:`analyze` hands back.

    Attributes:
        table: the top and bottom 10% of machine sentences by p_D against the human ones (a DataFrame; what
            ``dsgen analyze`` prints).
        result: the run's :class:`~dsgen.evaluation.results.Result`.
        run: its (data seed, training seed).
        paths / published: the Markdown and PNG written, and their copies under ``publish``.
    """

    table: Any
    result: Any = field(repr=False)
    run: tuple[int | None, int]
    paths: dict[str, Path] = field(default_factory=dict)
    published: list[Path] = field(default_factory=list)

    @property
    def written(self) -> list[Path]:
        return [*self.paths.values(), *self.published]


@records_call
def analyze(method: str = "rise", *, preset: str = "quick", seed: int | None = None, data_seed: int | None = None,
            out: str | Path = "runs", publish: str | Path | None = None, data_dir: str | None = None,
            progress: bool = True, command: str | None = None) -> Analysis:
    """RISE's Table 1 for one run of ``method`` (one whose reweighter records the SDI importance p_D: ``rise``,
    ``rise-filter``), made first if it is missing: the top and bottom 10% of machine sentences by p_D against the
    human ones, with p_D's histogram; Markdown and PNG under ``out/tables/<preset>/``.

    Args:
        seed / data_seed: the run (default: the preset's first run's).
    """
    from dsgen.data.analysis import write_rise_analysis
    from dsgen.method import get_method
    from dsgen.orchestration import check_overrides, prepare, run_many
    from dsgen.planning import plan_run

    if get_method(method).reweighter != "sdi":
        raise DsgenError(f"method '{method}' records no SDI importance p_D; analyse rise or rise-filter")
    ov = check_overrides()
    p, runs, runner = prepare([method], preset, None if seed is None else [seed], out, data_dir, progress, ov,
                              data_seeds=None if data_seed is None else [data_seed])
    seed = runs[0][1] if seed is None else seed
    run = (p.data_seed_for(data_seed), seed)
    result = run_many([method], p, [run], runner, ov)[method][0]
    train_file = runner.result_path(plan_run(method, p, seed, ov, run[0])).with_suffix(".train.jsonl")
    paths, table = write_rise_analysis(result, train_file, p, seed, runner.out / "tables" / p.name, data_dir,
                                       command or "")
    return Analysis(table, result, run, paths, publish_tables(paths, publish, p.name))


__all__ = ["Analysis", "analyze"]
