"""``dsgen.judge_claims``: the papers' claims tested against runs, one verdict per claim (``dsgen claims``; not
``dsgen.claims``, the package of the claims themselves, :mod:`dsgen.claims`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import (OnResult, Report, RunSettings, check_clean, commits_text, name_list,
                              published_provenance, records_call, run_commits)
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
        stage: ``exploratory`` (the runs chose what to confirm) or ``confirmatory`` (fresh data seeds, planned before).
        plans: a confirmation's plan per claim (:class:`~dsgen.claims.confirm.ConfirmPlan`).
        confirmation: the confirmation's report, when ``confirm`` named claims.
        recipes: the reports under the other recipes, when ``recipes`` named presets.
        robustness: then, one record per claim: its verdict under each recipe and whether it is robust
            (:func:`dsgen.claims.recipes.robustness`).
    """

    papers: list[str] = field(default_factory=list)
    verdicts: list[Any] = field(default_factory=list, repr=False)
    scores: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict, repr=False)
    figures: list[Any] = field(default_factory=list, repr=False)
    stage: str = "exploratory"
    plans: list[Any] = field(default_factory=list, repr=False)
    confirmation: "Claims | None" = field(default=None, repr=False)
    recipes: list["Claims"] = field(default_factory=list, repr=False)
    robustness: list[dict[str, Any]] = field(default_factory=list, repr=False)

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
    papers = name_list(papers)
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
           allow_mixed: bool = False, recipes: Sequence[str] | str | None = None,
           confirm: Sequence[str] | str | None = None,
           confirm_data_seeds: int | None = None, data_dir: str | None = None, progress: bool = True,
           on_result: OnResult | None = None, console: Any = None, command: str | None = None) -> Claims:
    """Test the papers' claims: run (or reuse) every method they involve, judge each claim (one test, the papers'
    claims Holm-adjusted as one family; :mod:`dsgen.claims`), and write the report (Markdown, PNG, JSON) under
    ``out/tables/<preset>/``. Its verdicts are exploratory. ``papers``: see :func:`chosen_papers`.

    ``recipes``: more presets (a list, or comma-separated; typically ``extends`` variants of ``preset`` that change
    its ``[training]``) to judge the same claims under, each in its own report, and a robustness report
    (:mod:`dsgen.claims.recipes`: each claim robust, recipe-dependent or inconclusive under every recipe;
    ``Claims.recipes``, ``Claims.robustness``). ``confirm``: claim ids (a list, or comma-separated) to confirm after the exploratory report
    (:mod:`dsgen.claims.confirm`): that many fresh data seeds as the exploratory run plans (``confirm_data_seeds``
    replaces the plan), the named claims tested on them alone as a new family, written as a second report
    (``Claims.confirmation``). ``publish`` needs every run made at this checkout's clean commit, unless
    ``allow_mixed`` (each run's commit is then listed). The other arguments are
    :class:`~dsgen.api.common.RunSettings`.

    Example:
        >>> report = dsgen.judge_claims(["control"], preset="smoke", seeds=[1, 2])  # doctest: +SKIP
        >>> report.table[["verdict", "p_holm"]]
    """
    from dsgen.claims import claim_methods, load_claims, load_figures
    from dsgen.claims.confirm import seeds_to_run

    settings = RunSettings(preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
                           encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                           backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                           out=out, publish=publish, data_dir=data_dir, progress=progress)
    chosen = chosen_papers(papers, preset)
    tested, figures = load_claims(chosen), load_figures(chosen)
    if not tested:
        raise DsgenError(f"the papers {', '.join(chosen)} make no claim a comparison here can test (only figures)")
    ids = confirmed_ids(confirm, tested)
    if confirm_data_seeds is not None and not ids:
        raise DsgenError("--confirm-data-seeds sets the data seeds of a confirmation: give the claims with --confirm")
    if confirm_data_seeds is not None:
        seeds_to_run([], confirm_data_seeds)  # checked before any run
    others = recipe_presets(preset, recipes)
    if publish is not None:
        check_clean(allow_mixed)
    planned, results, failures = settings.run_methods(claim_methods(tested), on_result, console)
    report = _report(planned, results, failures, tested, figures, chosen, settings, allow_mixed, command or "")
    if others:
        _across_recipes(report, others, settings, tested, figures, chosen, allow_mixed, command or "", on_result,
                        console)
    if ids:
        report.confirmation = _confirm(report, ids, confirm_data_seeds, settings, tested, chosen, allow_mixed,
                                       command or "", on_result, console)
    return report


def _confirm(report: Claims, ids: list[str], given: int | None, settings: RunSettings, tested: list[Any],
             chosen: list[str], allow_mixed: bool, command: str, on_result: OnResult | None, console: Any) -> Claims:
    """The confirmation of the claims ``ids`` (:mod:`dsgen.claims.confirm`): planned from the exploratory
    ``report``, run on fresh data seeds at its training seeds, judged alone as a new family with the instrument
    checks gating it."""
    from dataclasses import replace

    from dsgen.claims import claim_methods
    from dsgen.claims.confirm import confirmation_seeds, plan_confirmation, seeds_to_run

    confirmed = [c for c in tested if c.id in ids or c.instrument]
    plans = plan_confirmation(report.verdicts, [c.id for c in confirmed])
    fresh = confirmation_seeds(seeds_to_run([x for x in plans if x.claim.id in ids], given),
                               {d for d, _ in report.runs})
    again = replace(settings, data_seeds=fresh, seeds=training_seeds_per_data_seed(report.runs))
    planned, results, failures = again.run_methods(claim_methods(confirmed), on_result, console)
    return _report(planned, results, failures, confirmed, [], chosen, again, allow_mixed, command, plans=plans,
                   suffix="-confirm-" + "-".join(ids), given=given)


def training_seeds_per_data_seed(runs: list[tuple[int, int]]) -> list[int]:
    """The training seeds a confirmation runs on each fresh data seed: those every data seed of ``runs`` had (a nested
    design), else as many of the smallest as each had (``[(1, 1), (2, 2)]``, each seed its own data: one)."""
    per: dict[int, set[int]] = {}
    for d, t in runs:
        per.setdefault(d, set()).add(t)
    groups = list(per.values())
    if all(g == groups[0] for g in groups):
        return sorted(groups[0])
    return sorted(set().union(*groups))[:min(len(g) for g in groups)]


def recipe_presets(preset: str, recipes: Sequence[str] | str | None) -> list[str]:
    """The presets besides ``preset`` to judge the claims under, each checked before any run: it loads, is not given
    twice, and evaluates the same tasks (a one-line error otherwise)."""
    from dsgen.presets import load_preset

    names = name_list(recipes)
    main = load_preset(preset)
    loaded = [load_preset(x) for x in names]
    seen = [main.name]
    for name, p in zip(names, loaded):
        if p.name in seen:
            raise DsgenError(f"--recipes names preset '{p.name}' twice (or as --preset): give each recipe once")
        if list(p.tasks) != list(main.tasks):
            raise DsgenError(f"recipe '{p.name}' evaluates {', '.join(p.tasks)}, preset '{main.name}' "
                             f"{', '.join(main.tasks)}: recipes must differ in training only, not in what is scored")
        seen.append(p.name)
    return names


def _across_recipes(report: Claims, others: list[str], settings: RunSettings, tested: list[Any], figures: list[Any],
                    chosen: list[str], allow_mixed: bool, command: str, on_result: OnResult | None,
                    console: Any) -> None:
    """Judge the claims under each other recipe (its own report) and write the robustness report beside the main
    one (:mod:`dsgen.claims.recipes`)."""
    from dataclasses import replace

    from dsgen.artifacts import atomic_open, write_json
    from dsgen.claims import claim_methods
    from dsgen.claims.recipes import recipe_text, robustness, robustness_markdown
    from dsgen.reports.tables import runs_text

    reports = [report]
    for name in others:
        each = replace(settings, preset=name)
        planned, results, failures = each.run_methods(claim_methods(tested), on_result, console)
        reports.append(_report(planned, results, failures, tested, figures, chosen, each, allow_mixed, command))
    rows = robustness({r.preset.name: r.verdicts for r in reports})
    stem = report.paths["json"].stem + "-recipes-" + "-".join(r.preset.name for r in reports[1:])
    folder = report.paths["json"].parent
    paths = {"markdown": folder / f"{stem}.md", "json": folder / f"{stem}.json"}
    header = "; ".join(f"`{r.preset.name}`: {runs_text(r.runs)}" for r in reports) + "."
    with atomic_open(paths["markdown"]) as fh:
        fh.write(robustness_markdown(rows, {r.preset.name: recipe_text(r.preset) for r in reports}, header, command))
    write_json(paths["json"], {"recipes": {r.preset.name: {"recipe": recipe_text(r.preset), "report": r.paths["json"].name,
                                                           "runs": [list(x) for x in r.runs]} for r in reports},
                               "claims": rows})
    report.recipes, report.robustness = reports[1:], rows
    report.paths.update({"robustness_markdown": paths["markdown"], "robustness_json": paths["json"]})
    report.published += publish_tables(paths, settings.publish, report.preset.name)


def confirmed_ids(confirm: Sequence[str] | str | None, tested: list[Any]) -> list[str]:
    """The claim ids to confirm (a list, or comma-separated), each one of ``tested``; a one-line error otherwise."""
    ids = list(dict.fromkeys(name_list(confirm)))
    known = [c.id for c in tested]
    for i in ids:
        if i not in known:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("claim", i, known) + " (--confirm takes claim ids of the chosen papers)")
    return ids


def _report(planned: Any, results: dict[str, list[Any]], failures: list[Any], tested: list[Any], figures: list[Any],
            chosen: list[str], settings: RunSettings, allow_mixed: bool, command: str,
            plans: list[Any] | None = None, suffix: str = "", given: int | None = None) -> Claims:
    """Judge ``tested`` on the runs and write one report (exploratory, or confirmatory with its ``plans``), named
    ``claims[-<papers>]<suffix>``."""
    from dsgen.artifacts import atomic_open, write_json
    from dsgen.claims import FOUNDING, judge_all
    from dsgen.claims.recipes import recipe_text
    from dsgen.claims.report import claims_chart, claims_markdown, per_task_intervals, verdict_record
    from dsgen.models import describe_encoder

    p, runs = planned.preset, planned.runs
    failed = {f.method for f in failures}
    scores = {m: {r.run: r.average for r in rs} for m, rs in results.items() if len(rs) == len(runs) and m not in failed}
    means = {m: sum(v.values()) / len(v) for m, v in scores.items()}
    verdicts = judge_all(tested, scores, missing={f.method: f.reason for f in failures})
    per_task = per_task_intervals(verdicts, {m: {r.run: {t: x.spearman for t, x in r.tasks.items()} for r in results[m]}
                                             for m in scores}, list(p.tasks))
    commits = run_commits(results)
    provenance, refused = {"summary": commits_text(commits), "runs": commits}, None
    if settings.publish is not None:
        try:
            provenance = published_provenance(results, allow_mixed)
        except DsgenError as exc:  # the report is still written under out; nothing is published
            refused = DsgenError(f"{exc} (the report is under {planned.runner.out / 'tables' / p.name})")
    stage = "confirmatory" if plans is not None else "exploratory"
    folder = planned.runner.out / "tables" / p.name
    stem = ("claims" if sorted(chosen) == sorted(FOUNDING) else "claims-" + "-".join(chosen)) + suffix
    paths = {"markdown": folder / f"{stem}.md", "png": folder / f"{stem}.png", "json": folder / f"{stem}.json"}
    seed_list = sorted({s for _, s in runs})
    header = {"preset": p.name, "seeds": seed_list, "runs": runs, "tasks": list(p.tasks), "png": paths["png"].name,
              "encoders": sorted({describe_encoder(r.model) for rs in results.values() for r in rs}),
              "stage": stage, "plans": plans, "recipe": recipe_text(p), "per_task": per_task, "provenance": provenance, "given_seeds": given}
    claims_chart(verdicts, paths["png"], f"claims ({stage}), preset {p.name}, {len(runs)} runs")
    with atomic_open(paths["markdown"]) as fh:
        fh.write(claims_markdown(verdicts, means, header, command, figures, failures))
    write_json(paths["json"], {"preset": p.name, "recipe": recipe_text(p), "stage": stage, "seeds": seed_list, "runs": [list(r) for r in runs],
                               "scores": {m: [[d, t, v] for (d, t), v in sorted(sc.items())] for m, sc in scores.items()},
                               "failures": [{"method": f.method, "data_seed": f.data_seed, "seed": f.seed,
                                             "reason": f.reason} for f in failures],
                               "verdicts": [verdict_record(v) for v in verdicts],
                               "per_task": {c: {r: {t: iv.to_dict() for t, iv in by.items()} for r, by in roles.items()}
                                            for c, roles in per_task.items()},
                               "plans": [x.to_dict() for x in plans] if plans is not None else None,
                               "confirm_data_seeds_given": given,
                               "provenance": provenance})
    if refused is not None:
        raise refused
    return Claims(p, runs, results, failures, paths, publish_tables(paths, settings.publish, p.name), papers=chosen,
                  verdicts=verdicts, scores=scores, figures=figures, stage=stage, plans=plans or [])


__all__ = ["Claims", "chosen_papers", "confirmed_ids", "judge_claims", "recipe_presets", "training_seeds_per_data_seed"]
