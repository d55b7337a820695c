"""The claims design chosen by measurement (issue 31, item 5): how many data seeds, training seeds per data seed,
decide the most of the papers' claims within a time budget.

    python -m dsgen.benchmarks.design --scores results/cpu/claims.json --costs runs/cost --preset cpu \\
        --budget 9900 [--draws 400] [--json runs/design.json] [--observed results/cpu/claims-dino-control.json]

Two measurements go in, and one model:

- **What a run scores** (``--scores``, the ``claims.json`` of a ``dsgen claims`` run at D data seeds x T training
  seeds): each method's mean and its two spreads, training and data seed
  (:func:`dsgen.evaluation.statistics.variance_components`).
- **What a data seed costs** (``--costs``, a runs folder with one data seed of every method): the seconds of each
  stage, read from the result files' ``timings`` and the datasets' and fits' records (:func:`stage_costs`). A
  data seed costs ``generation + data-level fits + T x (every method's run)``: datasets and fits are made once per
  data seed and shared by the runs and methods that read them.
- **The nested model** (:class:`NestedModel`): a run's score is ``mean + data-seed effect + training effect``,
  with each method's own spreads; methods that read one generated dataset share their data-seed effects with
  correlation ``rho_data`` and their training effects with ``rho_train``. The claims report's own procedure
  (:func:`dsgen.claims.judge_all`: the control alone, Holm over the papers' claims) judges each draw; the share
  of draws in which a claim is decided is its plug-in power at that design (the measured means and spreads taken
  as the truth, as the report's "what would decide it" column does). The same model is the family simulation's
  (``tests/claims/test_family_simulation.py``) that checks the procedure's error rate.

Every design (D, T) whose predicted time fits the budget is scored by the expected number of the papers' claims
decided; the table lists them best first. Inputs per data seed are not varied: the learning curve
(results/cpu/curve-*.md) measured DINO's training spread growing with its data (sd 0.71, 0.58, 2.29 at 100,
300, 1,000 inputs) and its mean not moving, so a larger data seed costs more and resolves less.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.evaluation.statistics import Run, by_data_seed

# Methods of the claims that read one generated dataset per data seed (the rest generate their own or none).
SHARED = (("dino", "dino-no-smoothing", "dino-no-augmentation"), ("rise", "rise-dino", "rise-filter", "rise-random"),
          ("gense", "gense-no-filter"))
# Observed on cpu (3 x 3): +0.77 to +0.99 between the data-seed means of methods on one dataset; the mean
# correlation of their training residuals 0.2 (-0.36 to +0.82).
RHO_DATA, RHO_TRAIN = 0.9, 0.2


@dataclass
class NestedModel:
    """Scores of a comparison drawn from a nested model: per method a mean (``means``, default ``default_mean``)
    and ``spread[method] = (training sd, data-seed sd)``; the methods of a ``shared`` group correlated."""

    spread: dict[str, tuple[float, float]]
    means: dict[str, float] = field(default_factory=dict)
    shared: tuple[tuple[str, ...], ...] = SHARED
    rho_data: float = RHO_DATA
    rho_train: float = RHO_TRAIN
    default_mean: float = 55.0

    @classmethod
    def from_scores(cls, scores: dict[str, dict[Run, float]], **kw: Any) -> "NestedModel":
        """The model measured on a comparison's runs: each method's mean and variance components."""
        from dsgen.evaluation.statistics import variance_components

        spread, means = {}, {}
        for m, runs in scores.items():
            if not runs:
                continue
            vc = variance_components(runs)
            if len(set(runs.values())) > 1 and (vc["train_sd"] != vc["train_sd"] or vc["data_sd"] != vc["data_sd"]):
                raise SystemExit(f"'{m}': its runs cannot tell training from data-seed spread (give the study a claims "
                                 "run of 2 or more data seeds x 2 or more training seeds)")
            spread[m] = (vc["train_sd"] if vc["train_sd"] == vc["train_sd"] else 0.0,
                         vc["data_sd"] if vc["data_sd"] == vc["data_sd"] else 0.0)  # constant (base): no spread
            means[m] = math.fsum(runs.values()) / len(runs)
        return cls(spread, means, **kw)

    def draw(self, rng: Any, n_data: int, n_train: int, averaged: int = 1) -> dict[str, dict[Run, float]]:
        """One comparison's scores: method -> (data seed, training seed) -> score. ``averaged``: each run stands for
        the mean of that many training seeds (its training sd divided by the square root): the data seeds' means
        of a larger design drawn directly, which is all the claims' tests read."""
        import numpy as np

        group = {m: g for g, members in enumerate(self.shared) for m in members}
        data_z = rng.normal(size=(len(self.shared), n_data))
        train_z = rng.normal(size=(len(self.shared), n_data, n_train))
        scores = {}
        for m, (train_sd, data_sd) in self.spread.items():
            a, e = rng.normal(size=n_data), rng.normal(size=(n_data, n_train))
            if m in group:
                a = np.sqrt(self.rho_data) * data_z[group[m]] + np.sqrt(1 - self.rho_data) * a
                e = np.sqrt(self.rho_train) * train_z[group[m]] + np.sqrt(1 - self.rho_train) * e
            x = self.means.get(m, self.default_mean) + data_sd * a[:, None] + train_sd / np.sqrt(averaged) * e
            scores[m] = {(d + 1, t + 1): float(x[d, t]) for d in range(n_data) for t in range(n_train)}
        return scores


def scores_from_claims(path: str | Path) -> tuple[dict[str, dict[Run, float]], dict[str, str]]:
    """Per method, every run's 7-column average, as ``dsgen claims`` recorded them (``claims.json``), and the
    methods that produced no model there, with why."""
    record = json.loads(Path(path).read_text())
    scores = {m: {(int(d), int(s)): float(v) for d, s, v in runs} for m, runs in record["scores"].items()}
    failed = {f["method"]: f["reason"] for f in record.get("failures", []) if f["method"] not in scores}
    return scores, failed


def refit(measured: list[dict[str, dict[Run, float]]], shared: tuple[tuple[str, ...], ...] = SHARED) -> NestedModel:
    """The nested model fitted on every measured claims run (``measured``: each run's scores, oldest first; issue 41,
    item 5), not on one:

    - **means**: each method's run over the most data seeds (the latest of those);
    - **training sd**: the within-data-seed variance, pooled over its datasets (by degrees of freedom), of the
      latest run with 2 or more training seeds per data seed (a 15 x 1 run has none; a later recipe's replicates
      replace an earlier's);
    - **data-seed sd**: from the run with the most data seeds, the variance of its data seeds' means less the
      pooled training variance over its training seeds per data seed (0 when training explains it all);
    - **correlation** of methods on one generated dataset (``shared``): the mean correlation of their data seeds'
      means in that run, for the data-seed and the training effects alike (the 3 x 3 run's 0.9 / 0.2 came from 3
      data seeds; the 15 x 1 run observed 0.12-0.20).
    """
    import numpy as np

    from dsgen.evaluation.statistics import by_data_seed

    means: dict[str, float] = {}
    within: dict[str, list[tuple[float, int]]] = {}
    widths = {}
    for scores in measured:
        width = len({d for runs in scores.values() for d, _ in runs})
        for m, runs in scores.items():
            if runs and width >= widths.get(m, 0):  # the widest run's mean (the latest of equal width)
                means[m], widths[m] = math.fsum(runs.values()) / len(runs), width
            replicated = [(float(np.var(v, ddof=1)), len(v) - 1) for v in by_data_seed(runs).values() if len(v) > 1]
            if replicated:  # the latest run that replicates a dataset: the current recipe's training spread
                within[m] = replicated
    train_var = {m: math.fsum(v * df for v, df in xs) / sum(df for _, df in xs) for m, xs in within.items()}
    widest = max(measured, key=lambda sc: len({d for runs in sc.values() for d, _ in runs}))
    spread, seed_means = {}, {}
    for m in means:
        groups = by_data_seed(widest.get(m, {}))
        t = train_var.get(m, 0.0)
        seed_means[m] = [math.fsum(v) / len(v) for _, v in sorted(groups.items())]
        per = float(np.mean([len(v) for v in groups.values()])) if groups else 1.0
        between = float(np.var(seed_means[m], ddof=1)) if len(seed_means[m]) > 1 else 0.0
        spread[m] = (math.sqrt(t), math.sqrt(max(0.0, between - t / per)))
    rhos = []
    for group in shared:
        members = [m for m in group if len(seed_means.get(m, [])) > 2 and np.std(seed_means[m]) > 0]
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if len(seed_means[a]) == len(seed_means[b]):
                    rhos.append(float(np.corrcoef(seed_means[a], seed_means[b])[0, 1]))
    rho = max(0.0, float(np.mean(rhos))) if rhos else RHO_TRAIN
    return NestedModel(spread, means, shared=shared, rho_data=rho, rho_train=rho)


def measured_scores(spec: str) -> tuple[dict[str, dict[Run, float]], dict[str, str]]:
    """Every run's score of a measurement: a ``claims.json`` (:func:`scores_from_claims`), or ``<runs folder>:<preset>``
    (the result files of, e.g., ``dsgen compare`` under that preset; a method's largest variant folder)."""
    if spec.endswith(".json"):
        return scores_from_claims(spec)
    from dsgen.benchmarks.variance import scores as variant_scores

    folder, _, preset = spec.rpartition(":")
    if not folder:
        raise SystemExit(f"--scores {spec}: give a claims.json or <runs folder>:<preset>")
    out: dict[str, dict[Run, float]] = {}
    for v in variant_scores(Path(folder), preset):
        if len(v.values) > len(out.get(v.method, {})):
            out[v.method] = dict(v.values)
    return out, {}


def stage_costs(runs: str | Path, preset: str) -> dict[str, dict[str, Any]]:
    """Seconds per stage of one data seed of each method, measured in a runs folder, from the results of the variant
    ``preset`` plans today (a method's results under older settings, in other variant folders, are left out): the
    mean over its runs of each run stage (:meth:`dsgen.evaluation.results.Result.stage_seconds`; ``run`` their sum
    without getting the data-level fit, which the stage columns include), and the data-level work made once per data
    seed (:meth:`~dsgen.evaluation.results.Result.made`): ``generate data`` (the datasets the runs read) and ``fit``
    (data-level fits such as RISE's SDI classifier), each averaged over the data seeds measured. ``datasets`` and
    ``fits`` name them (``<data seed>:<key>``), so that :func:`data_seed_seconds` counts a shared one once; ``needs``
    names the methods whose dataset a method reads besides its own (``human`` is sized by DINO's); ``once`` marks a
    method whose runs are one run (``base``: no seed reaches it), paid once whatever the design."""
    from dsgen.evaluation.results import STAGE_TIMINGS, Result
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    plans = load_preset(preset)
    planned: dict[str, str] = {}
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((Path(runs) / "results" / preset).glob("*/*/data-*-seed-*.json")):
        if path.name.endswith((".failed.json", ".meta.json")):
            continue
        r = Result.load(path)
        d = r.run[0]
        if r.method not in planned:
            planned[r.method] = plan_run(r.method, plans, r.seed or 1, data_seed=d).variant
        if path.parent.name != planned[r.method]:
            continue
        row = out.setdefault(r.method, {"runs": 0, **{s: 0.0 for s in STAGE_TIMINGS}, "run": 0.0, "datasets": {},
                                        "fits": {}, "data_seeds": [], "needs": [], "run_keys": []})
        row["runs"] += 1
        row["data_seeds"] = sorted({*row["data_seeds"], d})
        row["run_keys"] = sorted({*row["run_keys"], str(r.extra.get("run_key"))})
        stages = r.stage_seconds()
        for stage, seconds in stages.items():
            row[stage] += seconds
        row["run"] += math.fsum(stages.values()) - float(r.timings.get("data_fit_seconds", 0.0))
        made = r.made()
        row["datasets"].update({f"{d}:{k}": v for k, v in made["datasets"].items()})
        row["fits"].update({f"{d}:{k}": v for k, v in made["fits"].items()})
        sized_by = (r.extra.get("size_of") or {}).get("method")
        if sized_by:
            row["needs"] = sorted({*row["needs"], sized_by})
    for row in out.values():
        for stage in (*STAGE_TIMINGS, "run"):
            row[stage] /= max(row["runs"], 1)
        row["once"] = row["runs"] > 1 and len(row["run_keys"]) == 1
        row["generate data"] = math.fsum(row["datasets"].values()) / len(row["data_seeds"])
        row["fit"] = math.fsum(row["fits"].values()) / len(row["data_seeds"])
    return out


def _with_needs(costs: dict[str, dict[str, Any]], methods: list[str]) -> list[str]:
    out = list(dict.fromkeys(methods))
    for m in list(out):
        out += [n for n in costs[m].get("needs", []) if n not in out]
    return out


def data_seed_seconds(costs: dict[str, dict[str, Any]], methods: list[str], train_seeds: int) -> float:
    """Predicted seconds of one data seed of ``methods`` at ``train_seeds`` training seeds: each dataset and fit
    once (those of the methods they read too, averaged over the data seeds at which every one of them was
    measured), each method's run ``train_seeds`` times (a method whose runs are one run, ``once``, is
    :func:`fixed_seconds`)."""
    every = _with_needs(costs, methods)
    common = set.intersection(*(set(costs[m]["data_seeds"]) for m in every))  # each data seed's whole cost measured
    if not common:
        raise SystemExit(f"no data seed of the --costs runs folder holds all of {', '.join(every)}: measure one data "
                         "seed of every method")
    made: dict[str, float] = {}
    for m in every:
        for kind in ("datasets", "fits"):
            made.update({f"{kind} {k}": v for k, v in costs[m][kind].items() if int(k.split(":")[0]) in common})
    runs = math.fsum(costs[m]["run"] for m in methods if not costs[m].get("once"))
    return math.fsum(made.values()) / len(common) + train_seeds * runs


def fixed_seconds(costs: dict[str, dict[str, Any]], methods: list[str]) -> float:
    """What a claims run pays once whatever its design: the runs no seed reaches (``base``)."""
    return math.fsum(costs[m]["run"] for m in methods if costs[m].get("once"))


def decide_rates(model: NestedModel, claims: list[Any], n_data: int, n_train: int, draws: int,
                 seed: int = 0) -> dict[str, float]:
    """Share of ``draws`` comparisons of the model at ``n_data`` x ``n_train`` in which each claim is decided by the
    claims report's procedure (claim id -> share)."""
    return simulate(model, claims, n_data, n_train, draws, seed)[0]


def simulate(model: NestedModel, claims: list[Any], n_data: int, n_train: int, draws: int,
             seed: int = 0) -> tuple[dict[str, float], dict[str, list[float]]]:
    """``draws`` comparisons of the model at ``n_data`` x ``n_train``, each judged by the claims report's procedure:
    per claim id the share decided and the half-widths of its intervals."""
    import numpy as np

    from dsgen.claims import judge_all

    rng = np.random.default_rng(seed)
    rates = {c.id: 0.0 for c in claims}
    widths: dict[str, list[float]] = {c.id: [] for c in claims}
    for _ in range(draws):
        for v in judge_all(claims, model.draw(rng, n_data, n_train)):
            rates[v.claim.id] += (v.verdict != "inconclusive") / draws
            if v.half_width is not None:
                widths[v.claim.id].append(v.half_width)
    return rates, widths


def study(model: NestedModel, claims: list[Any], costs: dict[str, dict[str, Any]], budget: float,
          data_seeds: range = range(2, 61), train_seeds: tuple[int, ...] = (1, 2, 3), draws: int = 400,
          seed: int = 0, run: list[Any] | None = None) -> list[dict[str, Any]]:
    """Every design (D, T) whose predicted time is within ``budget`` seconds: its time, the expected number of the
    papers' claims decided (the sum of their decide rates), the control's rate and each claim's, best first."""
    from dsgen.claims import claim_methods

    methods = claim_methods(run if run is not None else claims)  # what a claims run runs (``run``: its claims)
    missing = [m for m in _with_needs(costs, [m for m in methods if m in costs]) + methods if m not in costs]
    if missing:
        raise SystemExit(f"no cost measured for {', '.join(dict.fromkeys(missing))}: the --costs runs folder must hold "
                         "a data seed of every method of the claims")
    rows = []
    fixed, papers = fixed_seconds(costs, methods), [c.id for c in claims if not c.instrument]
    for t in train_seeds:
        per_seed = data_seed_seconds(costs, methods, t)
        for d in data_seeds:
            if d * per_seed + fixed > budget:
                break
            rates = decide_rates(model, claims, d, t, draws, seed)
            rows.append({"data_seeds": d, "train_seeds": t, "runs_per_method": d * t, "seconds": d * per_seed + fixed,
                         "expected_decided": math.fsum(rates[c] for c in papers),
                         "control": min((rates[c.id] for c in claims if c.instrument), default=float("nan")),
                         "rates": rates})
    return sorted(rows, key=lambda r: (-round(r["expected_decided"], 2), r["seconds"]))


def check(model: NestedModel, claims: list[Any], observed: dict[str, dict[Run, float]], draws: int = 400,
          seed: int = 0) -> tuple[Any, Any]:
    """The model's predictions at the design of an ``observed`` claims run (its data seeds x training seeds) beside
    what that run measured, a check of the study on runs it did not see: per method the mean and the sd of a data
    seed's mean (``sqrt(data sd^2 + training sd^2 / T)``); per claim the decide rate and the median half-width over
    ``draws`` simulated runs, against the run's verdict and half-width."""
    import numpy as np
    import pandas as pd

    from dsgen.claims import judge_all

    n_data = len({d for runs in observed.values() for d, _ in runs})
    n_train = max(len({t for _, t in runs}) for runs in observed.values())
    methods = []
    for m, runs in observed.items():
        means = np.asarray([math.fsum(v) / len(v) for v in by_data_seed(runs).values()])
        train, data = model.spread.get(m, (float("nan"), float("nan")))
        methods.append({"method": m, "mean (model)": model.means.get(m, float("nan")), "mean (run)": means.mean(),
                        "sd of a data seed's mean (model)": math.sqrt(data ** 2 + train ** 2 / n_train),
                        "sd of a data seed's mean (run)": means.std(ddof=1) if len(means) > 1 else float("nan")})
    decided, widths = simulate(model, claims, n_data, n_train, draws, seed)
    rows = [{"claim": v.claim.id, "decide rate (model)": decided[v.claim.id],
             "half-width (model, median)": float(np.median(widths[v.claim.id])) if widths[v.claim.id] else float("nan"),
             "verdict (run)": v.verdict, "half-width (run)": v.half_width if v.half_width is not None else float("nan")}
            for v in judge_all(claims, observed)]
    return pd.DataFrame(methods), pd.DataFrame(rows)


def confirm_rates(model: NestedModel, claims: list[Any], n_data: int, n_train: int, draws: int, seed: int = 0,
                  follow: float = 0.5, most: int = 15) -> tuple[dict[str, float], dict[str, float], float,
                                                             dict[str, list[int]]]:
    """"Explore, then confirm" at ``n_data`` x ``n_train``: each draw is judged, and the papers' claims it left
    inconclusive with p < ``follow`` whose confirmation :mod:`dsgen.claims.confirm` plans at ``most`` fresh data
    seeds or fewer (the budget of a second run) are confirmed on that many (the instrument checks run again and
    gate). Per claim the share decided by the exploration, the share decided by a confirmation, the mean number of
    confirmation data seeds per draw, and per claim the data seeds its plan asked for whenever it was promising
    (alone in its family; 1001: more than 1,000)."""
    import numpy as np

    from dsgen.claims import judge_all
    from dsgen.claims.confirm import plan_confirmation

    rng = np.random.default_rng(seed)
    explored = {c.id: 0.0 for c in claims}
    confirmed = {c.id: 0.0 for c in claims}
    seeds = 0.0
    asked: dict[str, list[int]] = {c.id: [] for c in claims}
    for _ in range(draws):
        verdicts = judge_all(claims, model.draw(rng, n_data, n_train))
        for v in verdicts:
            explored[v.claim.id] += (v.verdict != "inconclusive") / draws
        promising = [v.claim.id for v in verdicts if not v.claim.instrument and v.verdict == "inconclusive"
                     and v.p is not None and v.p < follow and not v.gate]
        instruments = [c.id for c in claims if c.instrument]
        for i in promising:
            alone = plan_confirmation(verdicts, [i])[0]
            asked[i].append(alone.data_seeds if alone.data_seeds is not None else 1001)
        affordable = [x for x in plan_confirmation(verdicts, promising + instruments)
                      if x.claim.id in promising and x.data_seeds is not None and x.data_seeds <= most]
        if not affordable:
            continue
        chosen = [x.claim.id for x in affordable]  # planned again as their own family (a smaller K, fewer seeds)
        plans = [x for x in plan_confirmation(verdicts, chosen + instruments) if x.claim.id in chosen]
        n = min(max(x.data_seeds or most for x in plans), most)
        seeds += n / draws
        for v in judge_all([c for c in claims if c.id in chosen or c.instrument], model.draw(rng, n, n_train)):
            if not v.claim.instrument:
                confirmed[v.claim.id] += (v.verdict != "inconclusive") / draws
    return explored, confirmed, seeds, asked


def robust_rates(models: list[NestedModel], claims: list[Any], n_data: int, n_train: int, draws: int,
                 seed: int = 0) -> dict[str, float]:
    """Per claim, the share of draws in which every recipe (one model each, drawn apart) reaches the same decided
    verdict: what ``dsgen claims --recipes`` would call robust at that design."""
    import numpy as np

    from dsgen.claims import judge_all

    rng = np.random.default_rng(seed)
    rates = {c.id: 0.0 for c in claims}
    for _ in range(draws):
        each = [judge_all(claims, m.draw(rng, n_data, n_train)) for m in models]
        for i, c in enumerate(claims):
            seen = {vs[i].verdict for vs in each}
            rates[c.id] += (len(seen) == 1 and "inconclusive" not in seen) / draws
    return rates


def families(papers: tuple[str, ...], scores: dict[str, dict[Run, float]]) -> list[tuple[tuple[str, ...], list[Any],
                                                                                        list[Any]]]:
    """Every set of the papers a claims run could test (the instrument check always with them), with all its claims
    (what the run costs: it runs their methods) and those with scores (what it can decide: a claim whose method
    produced no model has no p-value at any design): which papers to run in the budget is a choice of the design too."""
    from itertools import combinations

    from dsgen.claims import load_claims

    named = [p for p in papers if p != "control"]
    out = []
    for k in range(len(named), 0, -1):
        for chosen in combinations(named, k):
            every = load_claims([*chosen, "control"])
            out.append((chosen, every, [c for c in every if all(m in scores for m in c.methods)]))
    return out


def markdown(rows: list[dict[str, Any]], costs: dict[str, dict[str, Any]], methods: list[str]) -> str:
    import pandas as pd

    from dsgen.evaluation.results import STAGE_TIMINGS

    stage = pd.DataFrame([{"method": m, "datasets (per data seed)": costs[m]["generate data"], "fit": costs[m]["fit"],
                           **{s: costs[m][s] for s in STAGE_TIMINGS}, "run": costs[m]["run"]} for m in methods])
    designs = pd.DataFrame([{"papers": ", ".join(r["papers"]), "data seeds": r["data_seeds"],
                             "training seeds": r["train_seeds"], "minutes": r["seconds"] / 60,
                             "claims": r["claims"], "expected decided": r["expected_decided"], "control": r["control"]}
                            for r in rows])
    rates = pd.DataFrame([{"design": f"{'+'.join(r['papers'])} {r['data_seeds']}x{r['train_seeds']}", **r["rates"]}
                          for r in rows[:4]]).set_index("design").T
    return "\n".join(["### Seconds per stage of one data seed (result files' timings; datasets and fits once)", "",
                      stage.to_markdown(index=False, floatfmt=".1f"), "",
                      "### The best design within the budget for each set of papers (expected claims decided: plug-in, "
                      "simulated)", "", designs.to_markdown(index=False, floatfmt=".2f"), "",
                      "### Each claim's decide rate under the four best", "", rates.to_markdown(floatfmt=".2f"), ""])


def _check_observed(model: NestedModel, observed: str, draws: int) -> None:
    from dsgen.claims import FOUNDING, load_claims

    seen, _ = scores_from_claims(observed)
    tested = [c for c in load_claims(list(FOUNDING)) if all(m in seen for m in c.methods)]  # its family
    by_method, by_claim = check(model, tested, seen, draws)
    decided = (by_claim["verdict (run)"] != "inconclusive").astype(float)
    brier = float(((by_claim["decide rate (model)"] - decided) ** 2).mean())
    papers = by_claim["claim"].isin([c.id for c in tested if not c.instrument])
    print("\n".join(["### The model's predictions at the observed run's design, beside the run", "",
                      by_method.to_markdown(index=False, floatfmt=".2f"), "",
                      by_claim.to_markdown(index=False, floatfmt=".2f"), "",
                      f"Brier score of the decide rates against the run's decisions: {brier:.3f} (0: every claim "
                      f"foreseen; 0.25: a coin); expected decided {by_claim['decide rate (model)'][papers].sum():.2f} of "
                      f"the papers' claims, {int(decided[papers].sum())} decided.", ""]))


def refit_markdown(model: NestedModel, sources: list[str]) -> str:
    import pandas as pd

    rows = [{"method": m, "mean": model.means[m], "training sd": t, "data-seed sd": d}
            for m, (t, d) in model.spread.items()]
    return "\n".join([f"### The model refitted on {', '.join(sources)} (correlation on one dataset: "
                      f"{model.rho_data:.2f})", "", pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"), ""])


def weigh_markdown(model: NestedModel, other: NestedModel, design: str, draws: int) -> str:
    """The designs the claims command offers, weighed at one D x T with the model: the exploratory run alone,
    explore then confirm, and two recipes (``other`` as the second) judged robust."""
    import pandas as pd

    from dsgen.claims import load_claims

    n_data, n_train = (int(x) for x in design.lower().split("x"))
    claims = [c for c in load_claims(["dino", "control"]) if all(m in model.means for m in c.methods)]
    import numpy as np

    explored, confirmed, seeds, asked = confirm_rates(model, claims, n_data, n_train, draws)
    robust = robust_rates([model, other], claims, n_data, n_train, draws)
    rows = [{"claim": c.id, "explore (decide rate)": explored[c.id],
             "followed up (p < 0.5)": len(asked[c.id]) / draws,
             "its plan, data seeds (median)": float(np.median(asked[c.id])) if asked[c.id] else float("nan"),
             "+ confirm (confirmed rate)": confirmed[c.id], "two recipes (robust rate)": robust[c.id]} for c in claims]
    papers = [c.id for c in claims if not c.instrument]
    rows.append({"claim": "papers' claims, expected", **{k: sum(r[k] for r in rows if r["claim"] in papers)
                                                          for k in ("explore (decide rate)", "+ confirm (confirmed rate)",
                                                                    "two recipes (robust rate)")}})
    return "\n".join([f"### Designs weighed at {n_data} x {n_train} ({draws} draws; a confirmation: the inconclusive "
                      "claims with p < 0.5 whose plan needs at most 15 fresh data seeds, a second run's budget; "
                      f"{seeds:.1f} data seeds on average per exploratory run)", "",
                      pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"), ""])


def main(argv: list[str] | None = None) -> None:
    from dsgen.claims import FOUNDING, claim_methods, load_claims

    p = argparse.ArgumentParser(prog="python -m dsgen.benchmarks.design", description=__doc__.splitlines()[0])
    p.add_argument("--scores", required=True, action="append",
                   help="the claims.json of a `dsgen claims` run (every run's score); repeat it, oldest first, to fit the "
                        "model on every measured run (refit)")
    p.add_argument("--costs", help="a runs folder with one data seed of every method of the claims (the budget study)")
    p.add_argument("--preset", default="cpu", help="the preset folder of --costs' results")
    p.add_argument("--budget", type=float, default=9900.0, help="seconds (default 2 h 45 min)")
    p.add_argument("--draws", type=int, default=400)
    p.add_argument("--train-sd-scale", type=float, default=1.0,
                   help="every training sd times this: what a steadier run would buy")
    p.add_argument("--json", help="also write the study here")
    p.add_argument("--observed", help="the claims.json of a run at the chosen design: print the model's predictions at "
                                      "its design beside what it measured (a check of the study)")
    p.add_argument("--weigh", help="DxT (e.g. 15x1): weigh designs at it: one recipe, explore then confirm, and two "
                                   "recipes (the first --scores' model as the other recipe) robust")
    a = p.parse_args(argv)
    measured = [measured_scores(x) for x in a.scores]
    scores, failed = measured[-1][0], measured[-1][1]
    model = refit([m for m, _ in measured]) if len(measured) > 1 else NestedModel.from_scores(scores)
    model.spread = {m: (train * a.train_sd_scale, data) for m, (train, data) in model.spread.items()}
    if len(measured) > 1:
        print(refit_markdown(model, a.scores))
    if a.observed:
        _check_observed(model, a.observed, a.draws)
    if a.weigh:
        other = refit([measured[0][0]])  # the first measurement's recipe, with this model's correlation
        other.rho_data = other.rho_train = model.rho_data
        print(weigh_markdown(model, other, a.weigh, a.draws))
    if not a.costs:
        return
    costs = stage_costs(a.costs, a.preset)
    best = []
    for papers, every, claims in families(FOUNDING, scores):
        unmeasured = [m for m in claim_methods(every) if m not in costs]
        if unmeasured:  # every run of theirs failed in --costs (no result file): no time to predict from
            print(f"- papers {', '.join(papers)}: not costed, no result of {', '.join(unmeasured)} in {a.costs}")
            continue
        rows = study(model, claims, costs, a.budget, draws=a.draws, run=every)
        if rows:
            best.append({"papers": papers, "claims": sum(not c.instrument for c in claims), **rows[0]})
    if not best:
        raise SystemExit(f"no design of 2 or more data seeds fits {a.budget:.0f} s: raise --budget")
    best.sort(key=lambda r: (-round(r["expected_decided"], 2), r["seconds"]))
    methods = list(dict.fromkeys(m for c in load_claims(list(FOUNDING)) for m in c.methods if m in costs))
    print(markdown(best, costs, methods))
    for c in load_claims(list(FOUNDING)):  # no p-value in the report at any design: not in its Holm family either
        absent = [m for m in c.methods if m not in scores]
        if absent:
            print(f"- `{c.id}` cannot be decided at any design: " +
                  "; ".join(f"`{m}` produced no model ({failed.get(m, 'no result')})" for m in absent))
    if a.json:
        from dsgen.artifacts import write_json

        write_json(Path(a.json), {"budget_seconds": a.budget, "draws": a.draws, "train_sd_scale": a.train_sd_scale,
                                  "best": best, "costs": costs})


if __name__ == "__main__":
    main(sys.argv[1:])
