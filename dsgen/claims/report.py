"""The claims report: Markdown (one row per claim: the paper's figure, what this run measured, the
verdict) and a PNG of the measured differences with their intervals, one row per claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.claims import Verdict
from dsgen.redaction import command_block

MARKS = {"reproduced": "✅ reproduced", "contradicted": "❌ contradicted", "no effect": "⭕ no effect at this scale",
         "inconclusive": "➖ inconclusive"}


def _measured(v: Verdict, means: dict[str, float]) -> str:
    c = v.claim
    if not v.intervals:
        return v.reason
    if c.kind == "between":
        lo, up = v.used["lower"], v.used["upper"]
        return f"`{lo}` {means[lo]:.2f} < `{c.method}` {means[c.method]:.2f} < `{up}` {means[up]:.2f}"
    ref = v.used["reference"]
    return f"`{c.method}` {means[c.method]:.2f} vs `{ref}` {means[ref]:.2f}"


def _intervals(v: Verdict) -> str:
    if not v.intervals:
        return "-"
    parts = []
    for role, iv in v.intervals.items():
        label = f"vs `{v.used[role]}` " if len(v.intervals) > 1 else ""
        parts.append(label + iv.text() + (" (covers 0)" if iv.covers_zero else ""))
    return "; ".join(parts)


def _p_text(v: Verdict) -> str:
    if v.p is None:
        return "-"
    text = f"{v.p:.2g} ({v.leading})"
    return text if v.family == "instrument" else text + f"; Holm {v.p_holm:.2g}"


def _table(verdicts: list[Verdict], means: dict[str, float]) -> str:
    """One row per claim: the paper's figure, what this run measured, the test, the verdict and what would decide it."""
    import pandas as pd

    rows = []
    for v in verdicts:
        c, half, power = v.claim, v.half_width, v.power()
        rows.append({"paper": c.paper, "claim": c.statement, "where": f"{c.table}, p. {c.page}" if c.page else c.table,
                     "paper's figure": c.paper_text(), "this run (avg.)": _measured(v, means),
                     "Δ [95% CI over runs]": _intervals(v), "±": f"{half:.2f}" if half is not None else "-",
                     "p": _p_text(v),
                     "verdict": MARKS[v.verdict] + (f" ({v.reason})" if v.verdict == "inconclusive" and v.intervals
                                                    and v.reason else ""),
                     "what would decide it": power.text() if power else "-"})
    return pd.DataFrame(rows).to_markdown(index=False)


def per_task_intervals(verdicts: list[Verdict], task_scores: dict[str, dict[Any, dict[str, float]]],
                       tasks: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each judged claim's difference per test set, paired by run as the average's is, with its 95% interval
    (descriptive: the 7-column average stays the tested quantity): claim -> role -> task -> interval.
    ``task_scores``: method -> run -> task -> Spearman x 100."""
    from dsgen.evaluation.statistics import nested_interval

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for v in verdicts:
        if not v.intervals:
            continue
        method = task_scores[v.claim.method]
        out[v.claim.id] = {role: {t: nested_interval({r: s[t] for r, s in task_scores[name].items()},
                                                     {r: s[t] for r, s in method.items()}) for t in tasks}
                           for role, name in v.used.items()}
    return out


def _per_task_table(verdicts: list[Verdict], per_task: dict[str, dict[str, dict[str, Any]]], tasks: list[str]) -> str:
    import pandas as pd

    from dsgen.reports.tables import TASK_LABELS

    rows = []
    for v in verdicts:
        for role, by_task in per_task.get(v.claim.id, {}).items():
            row = {"claim": f"`{v.claim.id}`", "Δ": f"`{v.claim.method}` - `{v.used[role]}`"}
            row.update({TASK_LABELS.get(t, t): by_task[t].text() for t in tasks})
            row["avg. (tested)"] = v.intervals[role].text()
            rows.append(row)
    return pd.DataFrame(rows).to_markdown(index=False)


def _confirmation_lines(header: dict[str, Any]) -> list[str]:
    """The header of a confirmation (what it tests and how its data seeds were chosen), or of an exploratory
    report (that its verdicts are exploratory, and how to confirm one)."""
    from dsgen.claims.confirm import CONFIRM_FIRST, PLAUSIBLE

    if header.get("stage") != "confirmatory":
        return ["**Exploratory.** These verdicts are those of the runs that suggest what to test. Adding data seeds "
                "to this run after reading it and testing again spends the 5% level twice (optional stopping); to "
                "confirm a claim, run the same command with `--confirm <claim id,...>`: fresh data seeds (from "
                f"{CONFIRM_FIRST} on, never used here), as many as this run plans for 80% power over the effects "
                f"its {PLAUSIBLE:.0%} interval finds plausible, test the named claims alone as a new family "
                "(`dsgen/claims/confirm.py`).", ""]
    fresh = sorted({d for d, _ in header["runs"]})
    rows = [{"claim": x.claim.id, "exploratory": x.exploratory, "confirms": x.verdict,
             f"plausible ({PLAUSIBLE:.0%} interval)": "; ".join(f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in x.plausible.values())
             or "-", "planned at (Δ, sd)": "; ".join(f"{d:+.2f}, {sd:.2f}" for d, sd in x.planned.values()) or "-",
             "data seeds needed": x.data_seeds if x.data_seeds is not None else "-",
             "power there": f"{x.power:.0%}" if x.power is not None else (x.why or "-")} for x in header["plans"]]
    import pandas as pd

    number = (f"a number given with `--confirm-data-seeds {header['given_seeds']}` (a departure from the plan "
              "below, which is" if header.get("given_seeds") else "a number") + (
        " fixed from the exploratory run alone before any of them ran: the fewest giving each claim's verdict 80% "
        f"power at the plausible effect hardest to find (for a direction, the end of the exploratory {PLAUSIBLE:.0%} "
        "interval nearest the test's null but at least the margin from it; for no effect, the end farthest from 0 "
        "but within half the margin; the sd at its upper 80% bound; `dsgen/claims/confirm.py`)")
    number += ")" if header.get("given_seeds") else ""
    return ["**Confirmatory.** The claims below were chosen from an exploratory run and are tested here on "
            f"{len(fresh)} fresh data seeds ({fresh[0]}-{fresh[-1]}) that it never used, {number}. "
            "They are one new family at 5%, gated by the instrument checks on the same fresh runs. A confirmation is "
            "one test: rerunning it with more data seeds after reading it is the optional stopping it avoids.", "",
            pd.DataFrame(rows).to_markdown(index=False), ""]


def undefined_as_null(value: Any) -> Any:
    """``value`` with every non-finite number (an interval or p-value that is not defined, e.g. over one data seed) as
    None: JSON has no NaN, and dsgen's JSON writer refuses one."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: undefined_as_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [undefined_as_null(v) for v in value]
    return value


def verdict_record(v: Verdict) -> dict[str, Any]:
    """A verdict as the claims command's JSON writes it: the test behind it and, when inconclusive, what would
    decide it (a statistic that is not defined as null)."""
    power = v.power()
    return undefined_as_null({
            "claim": v.claim.id, "paper": v.claim.paper, "family": v.family, "verdict": v.verdict, "used": v.used,
            "intervals": {k: iv.to_dict() for k, iv in v.intervals.items()}, "half_width": v.half_width,
            "p_values": v.p_values, "p": v.p, "leading": v.leading, "p_holm": v.p_holm, "holm_step": v.step,
            "family_size": v.family_size, "alpha": v.alpha, "reason": v.reason, "gate": v.gate or None,
            "to_decide": power.to_dict() if power else None})


def claims_markdown(verdicts: list[Verdict], means: dict[str, float], header: dict[str, Any], command: str = "",
                    figures: list[Any] = (), failures: list[Any] = ()) -> str:
    """The report; ``failures`` (``dsgen.runs.records.RunFailed``) are the runs that produced no trained model: a claim
    on their method is inconclusive (its row says why) and each is listed, never scored."""
    from dsgen.claims import ALPHA, POWER
    from dsgen.runs.records import run_text
    from dsgen.reports.tables import runs_text, tasks_text

    instruments = [v for v in verdicts if v.family == "instrument"]
    papers = [v for v in verdicts if v.family != "instrument"]
    k = papers[0].family_size if papers else 0
    counts = {key: sum(v.verdict == key for v in papers) for key in MARKS}
    stage = header.get("stage", "exploratory")
    lines = [f"# The papers' claims, tested (preset `{header['preset']}`, {stage})", ""]
    lines += command_block(command)
    provenance = header.get("provenance")
    if provenance:
        lines += [("Made at one clean commit: " if provenance.get("clean") else
                   "**Mixed commits** (published with `--allow-mixed`): " if "clean" in provenance else
                   "Runs: ") + f"{provenance['summary']} (each run's commit is in the JSON file).", ""]
    if header.get("recipe"):
        lines += [f"Recipe: {header['recipe']}.", ""]
    lines += [f"Encoder: {', '.join(f'`{e}`' for e in header['encoders'])}; {runs_text(header['runs'])}. Scores are "
              f"Spearman x 100 averaged over {tasks_text(header['tasks'])}. Δ: the difference of the averages, paired "
              "by (data seed, training seed) run, with its 95% interval (a t-interval over the data seeds' mean "
              "differences; over training seeds when there is one dataset) and its half-width (±). Each claim is one "
              "test at a threshold t, whichever verdict it reaches (`dsgen/claims/__init__.py` shows why): t = "
              f"{ALPHA:.0%} for an instrument check, and for a paper's claim the threshold of its Holm step, "
              f"{ALPHA:g} / (K - j) (K claims, j of them decided in a direction before it), {ALPHA:g} / K at the first "
              "step. **reproduced**: the two-sided 1 - t interval on the paper's side of 0 (for 'close', the 1 - 2t "
              "interval within ± the margin; for 'between', both one-sided 1 - t bounds on their side); "
              "**contradicted**: the 1 - t interval on the other side (beyond ± the margin for 'close'); **no effect "
              "at this scale**: the 1 - 2t interval within ± the margin of 0 while the paper's difference is not; "
              "**inconclusive**: the row says why (too wide to decide even alone, stopped by the multiplicity step, "
              "a method without a result, or not judged because an instrument check failed). "
              + (f"With this report's K = {k}, the first step needs the {1 - ALPHA / k:.1%} interval for a direction "
                 f"and the {1 - 2 * ALPHA / k:.1%} one for no effect; alone (t = {ALPHA:.0%}) they are the "
                 f"{1 - ALPHA:.0%} and {1 - 2 * ALPHA:.0%} intervals; the Δ column shows the 95% one. " if k else "")
              + "p: the claim's p-value (the smallest of its verdicts', with the verdict it points to). The paper's "
              "figures are as printed (DINO's Table 2: STS12-16 / STSb / SICK-R, with the derived 7-column "
              "average); they come from the papers' models and scale (GPT2-XL, RoBERTa/BERT, tens of thousands of "
              "pairs): compare directions, not levels. *What would decide it*: for an inconclusive claim, a plug-in "
              f"power estimate (the observed mean difference and spread of the data seeds' means taken as true) of "
              f"the fewest data seeds, at this run's training seeds each, for {POWER:.0%} power at the strictest "
              f"threshold its family can ask ({ALPHA:g} / K, enough whatever the other claims do): a guide, not a "
              "promise, since the observed difference is itself noisy, and not a number of seeds to add to this run "
              "(a confirmation plans its own over the plausible effects).", ""]
    lines += _confirmation_lines(header)
    if instruments:
        lines += ["## Instrument checks", "",
                  f"Tested alone at {ALPHA:.0%}, outside the papers' family: they say whether the encoder and trainer "
                  "work at all, not whether a paper is right. They gate the family below: its claims are judged only "
                  "if every check here is reproduced.", "",
                  _table(instruments, means), ""]
    gate = next((v.gate for v in papers if v.gate), "")
    lines += [] if not papers else ["## The papers' claims", "",
              f"One family: Holm's step-down over its {k} tested claims at {ALPHA:.0%}, whichever verdict each "
              "reaches, so that the verdicts hold together (Holm: the adjusted p).", "",
              *([f"**Not judged**: {gate.removeprefix('not judged: ')}, so the instrument cannot be trusted to "
                 "resolve a difference and no claim below gets a verdict; each row gives what the family's test "
                 "would have said.", ""] if gate else
                ["Gated by the instrument checks above, which all passed.", ""] if instruments else
                ["**Ungated**: no instrument check is in this report (add `control` to the papers), so nothing "
                 "shows that the encoder and trainer resolve a difference at all.", ""]),
              f"Verdicts: {counts['reproduced']} reproduced, {counts['contradicted']} contradicted, "
              f"{counts['no effect']} no effect at this scale, {counts['inconclusive']} inconclusive.", "",
              _table(papers, means), ""]
    if header.get("per_task"):
        lines += ["## Per test set (descriptive)", "",
                  "Each claim's difference on each test set, paired by run as the average's, with its 95% interval. "
                  "Gains from synthetic data are often local to some test sets; the verdicts test the average "
                  "(last column) only, so these intervals are not tests and carry no multiplicity correction.", "",
                  _per_task_table(verdicts, header["per_task"], header["tasks"]), ""]
    lines += ["Notes:", ""] + [f"- `{v.claim.id}`: {v.claim.note}" for v in verdicts if v.claim.note]
    if failures:
        lines += ["", "Failed runs (no score: a method with any is not compared, and its claims are inconclusive):", ""]
        lines += [f"- `{f.method}` ({run_text(f.run)}): {f.reason}" for f in failures]
    if figures:
        lines += ["", "Headline figures no comparison here can test:", ""]
        lines += [f"- {f.paper} ({f.table}{f', p. {f.page}' if f.page else ''}): {f.statement}. Not tested: {f.why}."
                  for f in figures]
    lines += ["", f"![differences with their intervals]({header['png']})", ""]
    return "\n".join(lines)


def claims_chart(verdicts: list[Verdict], path: str | Path, title: str) -> None:
    """One row per (claim, comparison): the measured difference with its 95% interval over seeds,
    and the paper's difference as a hollow marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsgen.artifacts import write_figure

    rows = []
    for v in verdicts:
        for role, iv in v.intervals.items():
            paper = v.claim.paper_difference
            if v.claim.kind == "between" and v.claim.paper_method is not None:
                other = v.claim.paper_lower if role == "lower" else v.claim.paper_upper
                paper = v.claim.paper_method - other
            rows.append((f"{v.claim.id} (vs {v.used[role]})", iv, paper, v.verdict))
    colors = {"reproduced": "#2a9d3c", "contradicted": "#c0392b", "no effect": "#2c6fbb", "inconclusive": "#7f8c8d"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(rows), 2) + 1.2))
    for i, (label, iv, paper, verdict) in enumerate(reversed(rows)):
        if iv.low is not None:
            ax.plot([iv.low, iv.high], [i, i], color=colors[verdict], lw=2)
        ax.plot([iv.point], [i], "o", color=colors[verdict])
        if paper is not None:
            ax.plot([paper], [i], "D", mfc="none", color="black", ms=5)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("Δ Spearman x 100 (method - comparison), 95% CI over runs; ◇ paper")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    write_figure(fig, path)
