"""Lexical analysis of machine-written sentences against human ones (RISE, COLING 2022, Table 1).

Groups: the human sentences x_h, and the top and bottom 10% of machine sentences x_m by the
SDI importance p_D. Per group:

- BLEU-1..4 (NLTK's sentence BLEU, smoothing method 1) and Jaccard similarity of token sets,
  each sentence against its paired sentence (x_m against its x_h; x_h against its STS benchmark
  partner when the inputs are ``stsb-train``), averaged, x100;
- Distinct-1..3: distinct n-grams / all n-grams of the group, x100 (Li et al., 2016);
- Zipf coefficient: minus the slope of log frequency against log rank of the group's words
  (Holtzman et al., 2020).

Tokens are lower-cased words and punctuation marks (a regular expression; no tokenizer data).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from dsgen.redaction import command_block

TOKEN = re.compile(r"\w+|[^\w\s]")


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


def bleu(hypothesis: str, reference: str, n: int) -> float:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    return 100 * sentence_bleu([tokens(reference)], tokens(hypothesis), weights=tuple([1.0 / n] * n),
                               smoothing_function=SmoothingFunction().method1)


def jaccard(a: str, b: str) -> float:
    sa, sb = set(tokens(a)), set(tokens(b))
    return 100 * len(sa & sb) / len(sa | sb) if sa | sb else 0.0


def distinct(texts: list[str], n: int) -> float:
    grams = [tuple(t[i:i + n]) for t in map(tokens, texts) for i in range(len(t) - n + 1)]
    return 100 * len(set(grams)) / len(grams) if grams else 0.0


def zipf_coefficient(texts: list[str]) -> float:
    import numpy as np
    from scipy.stats import linregress

    counts = np.array(sorted(Counter(w for t in texts for w in tokens(t)).values(), reverse=True), dtype=float)
    if len(counts) < 2:
        return float("nan")
    ranks = np.arange(1, len(counts) + 1)
    return float(-linregress(np.log(ranks), np.log(counts)).slope)


def group_stats(pairs: list[tuple[str, str | None]]) -> dict[str, float]:
    """Metrics of (sentence, paired sentence or None) items."""
    import numpy as np

    texts = [s for s, _ in pairs]
    paired = [(s, r) for s, r in pairs if r]
    row: dict[str, float] = {"n": len(texts)}
    for n in range(1, 5):
        row[f"BLEU-{n}"] = float(np.mean([bleu(s, r, n) for s, r in paired])) if paired else float("nan")
    row["Jaccard"] = float(np.mean([jaccard(s, r) for s, r in paired])) if paired else float("nan")
    for n in range(1, 4):
        row[f"Distinct-{n}"] = distinct(texts, n)
    row["Zipf"] = zipf_coefficient(texts)
    return row


def rise_table(machine: list[tuple[str, str, float]], human: list[tuple[str, str | None]], fraction: float = 0.1) -> Any:
    """DataFrame with rows x_h, p_D top ``fraction`` and p_D bottom ``fraction``.

    Args:
        machine: (x_m, its x_h, p_D) per distinct machine sentence.
        human: (x_h, its human partner or None).
    """
    import pandas as pd

    ranked = sorted(machine, key=lambda m: m[2])
    k = max(1, int(round(fraction * len(ranked))))
    rows = {"x_h (human)": group_stats(human),
            f"x_m, p_D top {fraction:.0%}": group_stats([(m, h) for m, h, _ in ranked[-k:]]),
            f"x_m, p_D bottom {fraction:.0%}": group_stats([(m, h) for m, h, _ in ranked[:k]])}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "group"
    return frame.round(2)


def weight_histogram(weights: list[float], path: Any, title: str = "") -> None:
    """PNG histogram of importance weights, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsgen.artifacts import write_figure

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(weights, bins=40, range=(0, 1), color="#4c72b0")
    ax.set_xlabel("p_D (importance weight)")
    ax.set_ylabel("training pairs")
    ax.set_title(title)
    fig.tight_layout()
    write_figure(fig, path)


def write_rise_analysis(result: Any, train_file: Any, preset: Any, seed: int, folder: Any, data_dir: str | None,
                        command: str) -> tuple[dict[str, Any], Any]:
    """RISE's Table 1 for one run (its result and weighted training pairs): Markdown + PNG under
    ``folder``; returns the written paths and the table."""
    from pathlib import Path

    from dsgen.artifacts import atomic_open, ensure_writable_dir
    from dsgen.data.inputs import load_inputs
    from dsgen.data.pairs import read_pairs
    from dsgen.errors import DsgenError

    method = result.method
    scored = [x for x in read_pairs(train_file) if "p_d" in x.extra]
    if not scored:
        raise DsgenError(f"method '{method}' records no SDI importance p_D; analyse rise or rise-filter")
    machine = list({x.text_b: (x.text_b, x.text_a, x.extra["p_d"]) for x in scored
                    if x.extra.get("source") == "generated"}.values())
    partner: dict[str, str] = {}
    if preset.inputs == "stsb-train":
        from dsgen.data.sts import data_dir as resolve, read_stsb

        pairs = read_stsb(resolve(data_dir), "train")
        for a, b in zip(pairs.sentences1, pairs.sentences2):
            partner.setdefault(a.strip(), b.strip())
            partner.setdefault(b.strip(), a.strip())
    human = [(h, partner.get(h)) for h in load_inputs(preset.inputs, preset.max_inputs, data_dir, distinct=True)]
    table = rise_table(machine, human)
    folder = ensure_writable_dir(Path(folder))
    stem = f"analysis-{method}-seed{seed}"
    paths = {"markdown": folder / f"{stem}.md", "png": folder / f"{stem}.png"}
    weight_histogram([x.extra["p_d"] for x in scored], paths["png"], title=f"{method}, preset {preset.name}, seed {seed}")
    info = result.extra.get("reweighting", {})
    text = "\n".join([
        f"# RISE Table 1 analysis: `{method}`, preset `{preset.name}`, seed {seed}", "", *command_block(command),
        f"SDI classifier: validation accuracy {info.get('sdi_validation_accuracy', 'n/a')}% on "
        f"{info.get('sdi_validation_examples', '?')} held-out sentences (balanced; RISE reports 77.87% on STSb with BERT). "
        f"{len(machine)} distinct machine sentences, {len(human)} human sentences; p_D quantiles "
        f"{info.get('weight_quantiles', {})}.", "",
        "BLEU and Jaccard: each sentence against its paired sentence (machine: its x1; human: its STS benchmark "
        "partner). Distinct-N and Zipf over the group.", "", table.to_markdown(), "",
        f"![p_D histogram]({stem}.png)", ""])
    with atomic_open(paths["markdown"]) as fh:
        fh.write(text)
    return paths, table
