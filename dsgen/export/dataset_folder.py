"""A generated dataset as a Hugging Face dataset folder: Parquet splits and a ``README.md`` dataset card.

``datasets.load_dataset(folder)`` reads it offline. The Parquet files are written by ``datasets``
and the card by ``huggingface_hub``'s :class:`DatasetCard` (YAML front matter: license,
task_categories, tags, size category, configs). The card's body says how the data was made: the
generator and its fingerprint, the task spec with every instruction, the sampling settings and seed,
the counts before and after each postprocessing step, the reweighter that ran, and where it came
from (run key, dsgen version, git commit, the command).

Two sources (:func:`from_run`, :func:`from_pairs_file`): the dataset a run trained on (after
postprocessing and reweighting, with the weights; train and validation splits), or a generated pairs
file as it left the generator (a cache entry or ``dsgen generate --out``; one ``train`` split).
A run whose validation set was generated apart (RISE's dev set, from other inputs) has that second
cached dataset described too. A generator recorded by name only (the LM was not loaded in this
process, e.g. a Ray worker made the data) gets its fingerprint computed at export time, marked so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import read_json, sidecar_path
from dsgen.data.pairs import Pair, read_pairs
from dsgen.errors import DsgenError
from dsgen.folders import check_target_folder, provenance, staged_folder
from dsgen.identity import content_key
from dsgen.runs.records import DEFAULT_THREADS

SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


def size_category(n: int) -> str:
    return next((name for limit, name in SIZE_CATEGORIES if n < limit), "1M<n<10M")


@dataclass
class DatasetExport:
    """What goes into a dataset folder."""

    name: str
    splits: dict[str, list[Pair]]
    generation: dict[str, Any] = field(default_factory=dict)      # the generated dataset's sidecar
    run: dict[str, Any] = field(default_factory=dict)             # the run's result file (plan, counts, reweighting)
    origin: dict[str, Any] = field(default_factory=dict)          # provenance
    dev_generation: dict[str, Any] = field(default_factory=dict)  # the sidecar of a validation set generated apart


def with_fingerprint(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (a generated dataset's sidecar) with its generator's fingerprint: the recorded one, or
    when the generator is recorded by name only, :func:`dsgen.models.model_fingerprint` of that name now
    (``fingerprint_at: "export"``: the weights as they are when exporting, not necessarily when generating)."""
    gen = meta.get("generator")
    if not isinstance(gen, dict) or gen.get("fingerprint") or not gen.get("name"):
        return meta
    from dsgen.models import model_fingerprint

    try:
        fingerprint = model_fingerprint(str(gen["name"]))
    except (DsgenError, OSError, ValueError) as exc:
        fingerprint = {"unavailable": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return {**meta, "generator": {**gen, "fingerprint": fingerprint, "fingerprint_at": "export"}}


def cached_sidecar(cache: Path, key: str | None) -> dict[str, Any]:
    """The sidecar of the cached dataset with ``key`` (empty when there is none)."""
    if not key:
        return {}
    for found in sorted(Path(cache).glob(f"*-{key}.jsonl")):
        if sidecar_path(found).is_file():
            return with_fingerprint(read_json(sidecar_path(found)))
    return {}


def from_pairs_file(path: Path, command: str = "") -> DatasetExport:
    """A generated pairs file (with its sidecar) as it left the generator."""
    path = Path(path)
    meta_path = sidecar_path(path)
    if not path.is_file() or not meta_path.is_file():
        raise DsgenError(f"{path} is not a generated dataset (the file or its {meta_path.name} sidecar is missing)")
    meta = with_fingerprint(read_json(meta_path))
    return DatasetExport(path.stem, {"train": read_pairs(path)}, meta, {},
                         provenance(dataset_key=meta.get("dataset_key"), command=command))


def refuse_failed(result_path: Path, result: Any) -> None:
    """A one-line :class:`DsgenError` when the run at ``result_path`` failed: a failure record beside its result (it
    failed since: a folder from before a run's files were one set), or a result that is no trained model's score."""
    failed = Path(result_path).with_suffix(".failed.json")
    if failed.exists():
        try:
            reason = str(read_json(failed).get("reason", "")).splitlines()[0]
        except (DsgenError, AttributeError, IndexError):
            reason = ""
        raise DsgenError(f"{result_path}: the run failed since this result was written ({failed.name}"
                         f"{': ' + reason if reason else ''}); run it again before exporting its data")
    failure = result.training_failure()
    if failure is not None:
        raise DsgenError(f"{result_path}: the run failed ({failure}); run it again before exporting its data")


def from_run(result_path: Path, cache: Path, command: str = "", result: Any = None) -> DatasetExport:
    """The dataset a run used: its training pairs with their weights (``<run>.train.jsonl``) and its
    validation pairs, described by the run's result file (``result``, when the caller has read it already) and the
    cached dataset's sidecar. A failed run is refused in one line (:func:`refuse_failed`); :func:`from_plan` also
    refuses a result of another key than the plan's."""
    from dsgen.evaluation.results import Result

    if result is None:
        result = Result.load(result_path)
        refuse_failed(result_path, result)
    train = result_path.with_suffix(".train.jsonl")
    if not train.is_file():
        raise DsgenError(f"{result_path} has no training pairs beside it ({train.name}); the method trains on none")
    splits = {"train": read_pairs(train)}
    validation = result_path.with_suffix(".validation.jsonl")
    if validation.is_file():
        splits["validation"] = read_pairs(validation)
    key, dev_key = result.extra.get("dataset_key"), result.extra.get("dev_dataset_key")
    name = f"{result.method}-{result.preset}-data{result.data_seed}-seed{result.seed}"
    return DatasetExport(name, splits, cached_sidecar(cache, key), result.to_dict(),
                         provenance(run_key=result.extra.get("run_key"), dataset_key=key, dev_dataset_key=dev_key,
                                    command=command),
                         cached_sidecar(cache, dev_key))


def from_plan(plan: Any, runs: Path, command: str = "", data_dir: str | None = None,
              threads: int = DEFAULT_THREADS) -> DatasetExport:
    """The dataset of ``plan``'s run under the output folder ``runs`` (:func:`from_run`), only when the result there is
    the current plan's: its run key the key the plan computes now (its inputs, task spec, models and evaluation data
    as they are), and the run not failed. Anything else is refused in one line, before anything is written.

    Args:
        plan: the run (:func:`dsgen.planning.plan_run`) whose data to export.
        runs: the run's ``--out``.
        data_dir: the STS data folder the run was evaluated on (default ``$DSGEN_DATA_DIR``), part of its key.
        threads: the threads it trained with (default: every command's, :data:`~dsgen.runs.records.DEFAULT_THREADS`).
    """
    from dsgen.evaluation.results import Result
    from dsgen.runs.pipeline import Runner
    from dsgen.runs.records import Missing, result_path, run_label

    runs = Path(runs)
    path = result_path(runs, plan)
    label = f"{plan.method.name} (preset {plan.preset.name}, {run_label(plan)})"
    if not path.exists():
        failed = path.with_suffix(".failed.json")
        why = f"; it failed: {read_json(failed).get('reason')}" if failed.exists() else ""
        raise DsgenError(f"no run of {label} under {runs}{why}; run it first (dsgen run {plan.method.name} "
                         f"--preset {plan.preset.name} --out {runs}) or give --runs")
    result = Result.load(path)
    refuse_failed(path, result)
    runner = Runner(runs, data_dir, progress=False, makes=(), lock=False, threads=threads)  # reads only
    try:
        key = runner.run_key(plan)
    except Missing:
        key = None  # the datasets its key rests on are not there: it cannot be the current run
    if result.extra.get("run_key") != key:
        raise DsgenError(f"{path} is not the current run of {label}: its run key {result.extra.get('run_key')} is "
                         f"not the plan's {key or '(its datasets are missing)'} (its inputs, task spec, models or "
                         f"evaluation data changed since); run it again (dsgen run {plan.method.name} --preset "
                         f"{plan.preset.name} --out {runs}) before exporting its data")
    return from_run(path, runs / "cache" / "datasets", command, result)


def _rows(pairs: list[Pair]) -> list[dict[str, Any]]:
    weighted = any(p.weight is not None for p in pairs)
    rows = []
    for p in pairs:
        row = {"text_a": p.text_a, "text_b": p.text_b, "label": p.label}
        if weighted:
            row["weight"] = 1.0 if p.weight is None else float(p.weight)
        row["source"] = str(p.extra.get("source", "generated"))
        rows.append(row)
    return rows


def _generator_line(gen: dict[str, Any]) -> str:
    return f"- generator: `{gen.get('generator_name', '?')}` with `{json.dumps(gen.get('generator', {}), sort_keys=True)}`"


def dev_section(export: DatasetExport) -> list[str]:
    """The card's lines on a validation set generated apart from the training data (RISE's dev set)."""
    extra, dev, gen = export.run.get("extra", {}), export.dev_generation, export.generation
    if not extra.get("dev_dataset_key"):
        return []
    source = extra.get("plan", {}).get("dev_inputs")
    kept = extra.get("validation_pairs", len(export.splits.get("validation", [])))
    about = (f"The `validation` split is not held out from the training data: it was generated separately, with the "
             f"same generator and settings, from {extra.get('dev_inputs', '?')} other inputs"
             f"{f' (`{source}`)' if source else ''}, into {extra.get('dev_generated_pairs', '?')} pairs, then "
             f"postprocessed like the training data ({kept} pairs after postprocessing).")
    lines = ["## Validation set (generated apart)", "", about, "", f"- dataset key `{extra['dev_dataset_key']}`"]
    if dev:
        lines.append(_generator_line(dev))
        lines.append(f"- seed: {dev.get('seed')}; inputs: {dev.get('n_inputs')}; pairs: {dev.get('n_pairs')}")
        config = dev.get("config", {})
        if config != gen.get("config", config):
            lines.append(f"- generation settings: `{json.dumps(config, sort_keys=True)}`")
        lines.append(f"- counts: `{json.dumps(dev.get('stats', {}), sort_keys=True)}`")
    else:
        lines.append("- its cached dataset (and sidecar) was not found beside the run")
    return lines + [""]


def card_body(export: DatasetExport) -> str:
    """The card's Markdown body (after the YAML front matter)."""
    gen, run = export.generation, export.run
    plan = run.get("extra", {}).get("plan", {})
    lines = [f"# {export.name}", "", "Sentence pairs labelled with a similarity in [0, 1], made by "
             "dsgen from a language model's continuations (synthetic data).", ""]
    lines += ["## Splits", ""] + [f"- `{name}`: {len(pairs):,} pairs" for name, pairs in export.splits.items()] + [""]
    if gen:
        config = gen.get("config", {})
        lines += ["## Generation", "", _generator_line(gen),
                  f"- seed: {gen.get('seed')}; dataset key `{gen.get('dataset_key')}`",
                  f"- sampling: `{json.dumps(config.get('sampling', {}), sort_keys=True)}`",
                  f"- generation settings: `{json.dumps({k: v for k, v in config.items() if k != 'sampling'}, sort_keys=True)}`",
                  f"- counts: `{json.dumps(gen.get('stats', {}), sort_keys=True)}`",
                  f"- numerics: {', '.join(gen.get('numerics', [])) or 'not recorded'}", ""]
        spec = gen.get("task_spec")
        if spec:
            lines += ["### Task spec (every instruction)", "", "```json", json.dumps(spec, indent=2, sort_keys=True), "```", ""]
    lines += dev_section(export)
    if run:
        extra = run.get("extra", {})
        lines += ["## How the run used it", "", f"- method `{run.get('method')}`, preset `{run.get('preset')}`, "
                  f"data seed {run.get('data_seed')}, training seed {run.get('seed')}"]
        if extra.get("postprocess_counts"):
            lines.append(f"- postprocessing, counts before and after each step: "
                         f"`{json.dumps(extra['postprocess_counts'], sort_keys=True)}` with "
                         f"`{json.dumps(plan.get('postprocess'), sort_keys=True)}`")
        if plan.get("reweighter"):
            summary = {k: v for k, v in extra.get("reweighting", {}).items() if not isinstance(v, (list, dict))}
            lines.append(f"- reweighter `{json.dumps(plan['reweighter'], sort_keys=True)}`: "
                         f"`{json.dumps(summary, sort_keys=True)}` (column `weight`; 0 drops a pair)")
        lines.append("")
    lines += ["## Where it came from", "", "```json", json.dumps(export.origin, indent=2, sort_keys=True), "```", "",
              "## Use", "", "```python", "from datasets import load_dataset", "", 'pairs = load_dataset("path/to/this/folder")',
              "```", "", "Share it with `huggingface-cli upload <user>/<name> <this folder> --repo-type dataset`.", ""]
    return "\n".join(lines)


KIND = "dataset-folder"


def write_dataset_folder(export: DatasetExport, folder: Path, overwrite: bool = False) -> Path:
    """Write ``export`` as a dataset folder at ``folder`` (atomically; see the module docstring).

    Args:
        overwrite: replace an existing folder dsgen did not write as a dataset folder (never one holding
            runs; :func:`dsgen.folders.check_target_folder`).
    """
    check_target_folder(Path(folder), KIND, overwrite)  # before any work: a target it may not write fails at once
    from datasets import Dataset
    from huggingface_hub import DatasetCard, DatasetCardData

    method = export.run.get("method")
    rows = {name: _rows(pairs) for name, pairs in export.splits.items()}
    # The files are named by their contents: `datasets` keys its cache of a local folder by the card's
    # file patterns (not by the files' contents or mtimes), so a folder re-exported under the same name
    # with other pairs would otherwise load the stale copy.
    files = {name: f"data/{name}-{content_key(r)}-00000-of-00001.parquet" for name, r in rows.items()}
    data = DatasetCardData(
        license="other", language=["en"], task_categories=["sentence-similarity"],
        tags=["synthetic", "dsgen", *([method] if method else [])],
        size_categories=[size_category(sum(len(p) for p in export.splits.values()))], pretty_name=export.name,
        configs=[{"config_name": "default",
                  "data_files": [{"split": name, "path": path} for name, path in files.items()]}])
    with staged_folder(Path(folder), KIND, overwrite) as stage:
        (stage / "data").mkdir()
        for name, r in rows.items():
            Dataset.from_list(r).to_parquet(str(stage / files[name]))
        DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{card_body(export)}").save(stage / "README.md")
    return Path(folder)
