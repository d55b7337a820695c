"""Whether a claim's verdict survives the trainer's recipe: the same claims judged under several presets (recipes,
e.g. ``extends = "cpu"`` variants that change only ``[training]``), each its own family at 5%, and each claim marked

- **robust**: every recipe reaches the same decided verdict;
- **recipe-dependent**: the recipes disagree (a decided verdict under one, another or none under another), with
  each recipe's interval, so that a reader can tell a finding from a recipe artefact;
- **inconclusive under every recipe**.

Asking every recipe to agree cannot raise the rate of wrong "robust" verdicts above any one recipe's (5%): a
robust verdict that is wrong is wrong under the first recipe too."""

from __future__ import annotations

from typing import Any

from dsgen.claims import Verdict


def recipe_text(preset: Any) -> str:
    """A preset's trainer recipe in one line: its ``[training]`` table (nested tables as ``name.key``)."""
    def flat(table: dict[str, Any], prefix: str = "") -> list[str]:
        out = []
        for key, value in table.items():
            out += flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key} = {value!r}"]
        return out

    items = flat(preset.training)
    return f"preset `{preset.name}`: training " + (", ".join(items) if items else "as each method's own")


def robustness(verdicts: dict[str, list[Verdict]]) -> list[dict[str, Any]]:
    """One record per claim: its verdict and 95% interval under each recipe (``verdicts``: recipe -> verdicts, the
    same claims in the same order) and the judgement across recipes (module docstring)."""
    names = list(verdicts)
    rows = []
    for i, first in enumerate(verdicts[names[0]]):
        each = {name: verdicts[name][i] for name in names}
        seen = {v.verdict for v in each.values()}
        across = ("robust" if len(seen) == 1 and "inconclusive" not in seen else
                  "inconclusive under every recipe" if seen == {"inconclusive"} else "recipe-dependent")
        rows.append({"claim": first.claim.id, "paper": first.claim.paper, "family": first.family, "across": across,
                     "recipes": {name: {"verdict": v.verdict, "reason": v.reason or None,
                                        "intervals": {role: iv.to_dict() for role, iv in v.intervals.items()}}
                                 for name, v in each.items()}})
    return rows


def _cell(record: dict[str, Any]) -> str:
    from dsgen.evaluation.statistics import Interval

    ivs = "; ".join(Interval(**{k: iv[k] for k in ("point", "low", "high", "method")}).text()
                    for iv in record["intervals"].values())
    return f"{record['verdict']}" + (f", Δ {ivs}" if ivs else "")


def robustness_markdown(rows: list[dict[str, Any]], recipes: dict[str, str], header: str, command: str) -> str:
    """The robustness report: each recipe named with its training settings, then one row per claim."""
    import pandas as pd

    from dsgen.redaction import command_block

    counts = {k: sum(r["across"] == k for r in rows if r["family"] != "instrument")
              for k in ("robust", "recipe-dependent", "inconclusive under every recipe")}
    lines = ["# The papers' claims across trainer recipes", "", *command_block(command), header, "",
             "Recipes (each its own claims report, its own family at 5%):", ""]
    lines += [f"- `{name}`: {text}" for name, text in recipes.items()]
    lines += ["", "**robust**: every recipe reaches the same decided verdict (a wrong robust verdict is wrong under "
              "each recipe, so at most 5%, as one recipe's); **recipe-dependent**: they disagree, each recipe's "
              "verdict and 95% interval beside it; **inconclusive under every recipe**. The instrument checks are "
              "judged the same way, and gate each recipe's family in its own report.", "",
              f"Papers' claims: {counts['robust']} robust, {counts['recipe-dependent']} recipe-dependent, "
              f"{counts['inconclusive under every recipe']} inconclusive under every recipe.", ""]
    table = [{"claim": f"`{r['claim']}`", "paper": r["paper"], **{name: _cell(rec) for name, rec in r["recipes"].items()},
              "across recipes": f"**{r['across']}**"} for r in rows]
    lines += [pd.DataFrame(table).to_markdown(index=False), ""]
    return "\n".join(lines)


__all__ = ["recipe_text", "robustness", "robustness_markdown"]
