"""dsgen results in MTEB's result layout, written by MTEB's own objects (``mteb``, an extra).

``<out>/results/<model>/<revision>/<Task>.json`` plus ``model_meta.json`` per model and revision
(and ``<out>/dsgen_provenance.json``, where each came from):
exactly what ``mteb.ResultCache(<out>).load_results()`` reads. Each task file is an ``mteb.TaskResult``
(task_name, dataset_revision, mteb_version, evaluation_time, ``scores.test[]`` with main_score and
the cosine, Euclidean and Manhattan Spearman and Pearson, on MTEB's 0-1 scale) saved by
``ResultCache.save_to_cache``.

Model names: only an untrained model MTEB knows, evaluated as MTEB evaluates (raw text, float32),
keeps MTEB's name and revision (``dsgen eval minilm-l6`` or the ``base`` method on it is
``sentence-transformers/all-MiniLM-L6-v2`` at MTEB's revision, so its export lands beside the
published results). A model a run trained is ``dsgen/<method>-<preset>-<variant>-data<d>-seed<t>`` at
revision ``<run key>``, whatever encoder it started from, so runs of two methods (or two variants, or
two seeds) are different models and never overwrite each other; any other model is named by dsgen
(:func:`model_meta`). Two results that would still land in the same task file with different scores
are refused. Only tasks MTEB has are written: ``sickr-test`` (SentEval's SICK-R test split) is not
MTEB's SICK-R (all 9,927 pairs) and is left out, with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError
from dsgen.folders import PROVENANCE, provenance, staged_folder

TASK_NAMES = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
              "stsb": "STSBenchmark", "sickr": "SICK-R"}
KNOWN_MODELS = {"minilm-l6": "sentence-transformers/all-MiniLM-L6-v2"}  # embedded encoder -> MTEB model
KIND = "mteb-results"


def import_mteb() -> Any:
    try:
        import mteb
    except ImportError:
        raise DsgenError("dsgen export mteb needs MTEB; install it with: pip install 'dsgen[mteb]'") from None
    return mteb


def untrained(result: Any) -> bool:
    """Whether ``result`` scores a model as it was published: ``dsgen eval`` of a model (no method), or a
    run whose plan trains nothing (``base``), evaluated on MTEB's raw text in float32."""
    plan = result.extra.get("plan")
    as_is = result.method is None or (isinstance(plan, dict) and "trainer" in plan and plan["trainer"] is None
                                      and "training" not in result.extra)
    evaluation = result.extra.get("evaluation_data") or {}
    return as_is and evaluation.get("preprocess", "raw") == "raw" and evaluation.get("dtype", "float32") == "float32"


def model_meta(result: Any) -> Any:
    """MTEB's ModelMeta of the model behind ``result`` (see the module docstring): MTEB's own for an
    :func:`untrained` model it knows (an embedded alias or a Hub name), else one dsgen names."""
    mteb = import_mteb()
    from mteb.models import ModelMeta

    known = KNOWN_MODELS.get(result.model) or (result.model if "/" in result.model else None)
    if known and untrained(result):
        try:
            return mteb.get_model_meta(known)
        except (KeyError, ValueError):
            pass
    if result.method is not None:
        variant = result.extra.get("variant")
        name = f"dsgen/{result.method}-{result.preset}{f'-{variant}' if variant else ''}-data{result.data_seed}-seed{result.seed}"
        revision = str(result.extra.get("run_key") or "no-run-key")
    else:
        name = "dsgen/" + str(result.model).strip("/").replace("/", "__").replace(":", "_").replace("?", "_")
        revision = str(result.extra.get("evaluation_data", {}).get("fingerprint", "unknown"))[:16]
    return ModelMeta(name=name, revision=revision, release_date=None, languages=["eng-Latn"], loader=None,
                     n_parameters=None, memory_usage_mb=None, max_tokens=None, embed_dim=None, license=None,
                     open_weights=True, public_training_code=None, public_training_data=None,
                     framework=["Sentence Transformers"], reference=None, similarity_fn_name="cosine",
                     use_instructions=False, training_datasets=None, adapted_from=known or str(result.model))


def task_scores(score: Any) -> dict[str, float]:
    """One task's scores in MTEB's STS keys and scale (0-1)."""
    out = {"cosine_spearman": score.spearman / 100, "cosine_pearson": score.pearson / 100,
           "spearman": score.spearman / 100, "pearson": score.pearson / 100, "main_score": score.spearman / 100}
    for name in ("euclidean", "manhattan"):
        for stat in ("spearman", "pearson"):
            value = getattr(score, f"{name}_{stat}", None)
            if value is None:
                raise DsgenError(f"this result has no {name} scores (made before dsgen recorded them); evaluate it again")
            out[f"{name}_{stat}"] = value / 100
    return out


def run_label(result: Any) -> str:
    """A result as a user names it: its method, preset and seeds, or the model ``dsgen eval`` scored."""
    if result.method is None:
        return str(result.model)
    return f"{result.method} (preset {result.preset}, data seed {result.data_seed}, seed {result.seed})"


def not_exportable(result: Any) -> str | None:
    """Why ``result`` is no model's score to export (one line), or None: a run whose failure record lies beside its
    result file (it failed since that result was written, so the result is not its current one), or a result that is
    not a score (:meth:`dsgen.evaluation.results.Result.training_failure`: a trained run that trained nothing or
    diverged, a non-finite score). ``base`` and ``dsgen eval`` results, which train nothing, are scores."""
    source = getattr(result, "source", None)
    if source is not None and Path(source).with_suffix(".failed.json").exists():
        return f"its run failed since ({Path(source).with_suffix('.failed.json').name} beside {Path(source).name})"
    return result.training_failure()


def export_mteb(results: list[Any], out: Path, command: str = "", overwrite: bool = False) -> tuple[list[Path], list[str]]:
    """Write every result's tasks in MTEB's layout under ``out`` (atomically); returns (task files, notes).

    A result that is no model's score (:func:`not_exportable`: a failed, stale or untrained run) is skipped, and a note
    says so in one line; when every result is skipped, a one-line :class:`DsgenError` before anything is written.

    Args:
        overwrite: replace an existing folder dsgen did not write as MTEB results (never one holding
            runs; :func:`dsgen.folders.check_target_folder`).
    """
    import json

    written: list[Path] = []
    notes: list[str] = []
    kept = []
    for result in results:
        why = not_exportable(result)
        if why is None:
            kept.append(result)
        else:
            where = f" ({result.source})" if getattr(result, "source", None) is not None else ""
            notes.append(f"skipped {run_label(result)}{where}: {why}")
    if not kept:
        raise DsgenError(f"nothing to export: every result was skipped ({'; '.join(notes)})")
    results = kept
    mteb = import_mteb()
    from mteb import ResultCache, TaskResult

    origins: list[dict[str, Any]] = []
    filed: dict[tuple[str, str, str], tuple[Any, dict[str, float]]] = {}  # (model, revision, task) -> (result, scores)
    with staged_folder(Path(out), KIND, overwrite) as stage:
        cache = ResultCache(cache_path=stage)
        for result in results:
            meta = model_meta(result)
            for task, score in result.tasks.items():
                if task not in TASK_NAMES:
                    notes.append(f"{result.method or result.model}: {task} is not an MTEB task; left out")
                    continue
                where, scores = (meta.name, meta.revision, TASK_NAMES[task]), task_scores(score)
                if where in filed:  # the same model scored twice (the base method under every seed): once
                    first, before = filed[where]
                    if before != scores:
                        raise DsgenError(f"{run_label(first)} and {run_label(result)} are both {meta.name} at revision "
                                         f"{meta.revision} with other {where[2]} scores; export them into separate folders")
                    continue
                filed[where] = (result, scores)
                mteb_task = mteb.get_task(TASK_NAMES[task])
                seconds = float(result.timings.get("evaluate_seconds", result.timings.get("encode_and_score_seconds", 0.0)))
                task_result = TaskResult.from_task_results(mteb_task, {"test": {"default": scores}},
                                                           evaluation_time=seconds)
                cache.save_to_cache(task_result, meta)
                path = cache.get_task_result_path(task_result.task_name, meta)
                written.append(Path(out) / path.relative_to(stage))
            origins.append({"model": meta.name, "revision": meta.revision,
                            **provenance(run_key=result.extra.get("run_key"), command=command, dsgen_model=result.model)})
        # beside MTEB's tree, not in it (its loader reads every JSON of a revision folder as a task result)
        (stage / PROVENANCE).write_text(json.dumps(origins, indent=2, sort_keys=True, allow_nan=False) + "\n",
                                        encoding="utf-8")
    return written, notes
