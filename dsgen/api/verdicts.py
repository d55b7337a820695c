"""``dsgen.judge_claims``: the papers' claims tested against runs, one verdict per claim (``dsgen claims``; not
``dsgen.claims``, the package of the claims themselves, :mod:`dsgen.claims`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import OnResult, Report, RunSettings, records_call
from dsgen.api.common import publish as publish_tables  # ``publish`` is also an argument's name
from dsgen.errors import DsgenError
from dsgen.orchestration import Seeds


@dataclass
class Claims(Report):
    """What :func:`judge_claims` hands back.

    Attributes:
        papers: the papers whose claims were tested.
        verdicts: one :class:`~dsgen.claims.Verdict` per claim (the test behind it).
        scores: per method with every run, the 7-column average of each (data seed, training seed) run.
        figures: the papers' headline figures no comparison here can test.
    """

    papers: list[str] = field(default_factory=list)
    verdicts: list[Any] = field(default_factory=list, repr=False)
    scores: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict, repr=False)
    figures: list[Any] = field(default_factory=list, repr=False)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Each verdict as the report's JSON file holds it (``verdicts`` there)."""
        from dsgen.claims.report import verdict_record

        return [verdict_record(v) for v in self.verdicts]

    @property
    def table(self) -> Any:
        """One row per claim: paper, statement, family, verdict, the claim's p-value, its Holm-adjusted one, the
        95% interval's half-width and why it is undecided (what ``dsgen claims`` prints, with the numbers)."""
        import pandas as pd

        rows = [{"claim": v.claim.id, "paper": v.claim.paper, "statement": v.claim.statement, "family": v.family,
                 "verdict": v.verdict, "p": v.p, "p_holm": v.p_holm, "half_width": v.half_width, "reason": v.reason}
                for v in self.verdicts]
        return pd.DataFrame(rows).set_index("claim")

    @property
    def means(self) -> dict[str, float]:
        """Each method's mean 7-column average over its runs."""
        return {m: sum(v.values()) / len(v) for m, v in self.scores.items()}


def chosen_papers(papers: Sequence[str] | str | None, preset: str) -> list[str]:
    """The papers to test: ``papers`` (a list, or comma-separated; ``all``: every paper), else the preset's
    ``claims_papers``, else the founding ones; a one-line error naming an unknown paper."""
    from dsgen.claims import FOUNDING, paper_files
    from dsgen.presets import load_preset

    known = paper_files()
    if isinstance(papers, str):
        papers = [x.strip() for x in papers.split(",") if x.strip()] if papers else None
    chosen = list(papers) if papers else list(load_preset(preset).claims_papers or FOUNDING)
    chosen = known if chosen == ["all"] else chosen
    for name in chosen:
        if name not in known:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("paper", name, [*known, "all"]))
    return chosen


@records_call
def judge_claims(papers: Sequence[str] | str | None = None, *, preset: str = "cpu", seeds: Seeds = None,
           data_seeds: Seeds = None, generator: str | None = None, base_url: str | None = None,
           encoder: str | None = None, device: str | None = None, preprocess: str | None = None,
           save_model: bool = False, backend: str = "local", address: str | None = None, workers: int | None = None,
           cpus_per_worker: int | None = None, out: str | Path = "runs", publish: str | Path | None = None,
           data_dir: str | None = None, progress: bool = True, on_result: OnResult | None = None,
           console: Any = None, command: str | None = None) -> Claims:
    """Test the papers' claims: run (or reuse) every method they involve, judge each claim (one test, the papers'
    claims Holm-adjusted as one family; :mod:`dsgen.claims`), and write the report (Markdown, PNG, JSON) under
    ``out/tables/<preset>/``. ``papers``: see :func:`chosen_papers`. The other arguments are
    :class:`~dsgen.api.common.RunSettings`.

    Example:
        >>> report = dsgen.judge_claims(["control"], preset="smoke", seeds=[1, 2])  # doctest: +SKIP
        >>> report.table[["verdict", "p_holm"]]
    """
    from dsgen.artifacts import atomic_open, write_json
    from dsgen.claims import FOUNDING, claim_methods, judge_all, load_claims, load_figures
    from dsgen.claims.report import claims_chart, claims_markdown, verdict_record
    from dsgen.models import describe_encoder

    settings = RunSettings(preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
                           encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                           backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                           out=out, publish=publish, data_dir=data_dir, progress=progress)
    chosen = chosen_papers(papers, preset)
    tested, figures = load_claims(chosen), load_figures(chosen)
    if not tested:
        raise DsgenError(f"the papers {', '.join(chosen)} make no claim a comparison here can test (only figures)")
    names = claim_methods(tested)
    planned, results, failures = settings.run_methods(names, on_result, console)
    p, runs = planned.preset, planned.runs
    failed = {f.method for f in failures}
    scores = {m: {r.run: r.average for r in rs} for m, rs in results.items() if len(rs) == len(runs) and m not in failed}
    means = {m: sum(v.values()) / len(v) for m, v in scores.items()}
    seed_list = sorted({s for _, s in runs})
    verdicts = judge_all(tested, scores, missing={f.method: f.reason for f in failures})
    folder = planned.runner.out / "tables" / p.name
    stem = "claims" if sorted(chosen) == sorted(FOUNDING) else "claims-" + "-".join(chosen)
    paths = {"markdown": folder / f"{stem}.md", "png": folder / f"{stem}.png", "json": folder / f"{stem}.json"}
    header = {"preset": p.name, "seeds": seed_list, "runs": runs, "tasks": list(p.tasks), "png": paths["png"].name,
              "encoders": sorted({describe_encoder(r.model) for rs in results.values() for r in rs})}
    claims_chart(verdicts, paths["png"], f"claims, preset {p.name}, {len(runs)} runs")
    with atomic_open(paths["markdown"]) as fh:
        fh.write(claims_markdown(verdicts, means, header, command or "", figures, failures))
    write_json(paths["json"], {"preset": p.name, "seeds": seed_list, "runs": [list(r) for r in runs],
                               "scores": {m: [[d, t, v] for (d, t), v in sorted(sc.items())] for m, sc in scores.items()},
                               "failures": [{"method": f.method, "data_seed": f.data_seed, "seed": f.seed,
                                             "reason": f.reason} for f in failures],
                               "verdicts": [verdict_record(v) for v in verdicts]})
    return Claims(p, runs, results, failures, paths, publish_tables(paths, settings.publish, p.name), papers=chosen,
                  verdicts=verdicts, scores=scores, figures=figures)


__all__ = ["Claims", "chosen_papers", "judge_claims"]
