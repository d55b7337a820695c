"""dsgen results in MTEB's result layout, written by MTEB's own objects (``mteb``, an extra).

``<out>/results/<model>/<revision>/<Task>.json`` plus ``model_meta.json`` per model and revision
(and ``<out>/dsgen_provenance.json``, where each came from):
exactly what ``mteb.ResultCache(<out>).load_results()`` reads. Each task file is an ``mteb.TaskResult``
(task_name, dataset_revision, mteb_version, evaluation_time, ``scores.test[]`` with main_score and
the cosine, Euclidean and Manhattan Spearman and Pearson, on MTEB's 0-1 scale) saved by
``ResultCache.save_to_cache``.

Model names: an embedded encoder MTEB knows keeps MTEB's name and revision (``minilm-l6`` is
``sentence-transformers/all-MiniLM-L6-v2`` at MTEB's revision, so its export lands beside the
published results); a model dsgen trained is ``dsgen/<method>-<preset>-data<d>-seed<t>`` at revision
``<run key>``. Only tasks MTEB has are written: ``sickr-test`` (SentEval's SICK-R test split) is not
MTEB's SICK-R (all 9,927 pairs) and is left out, with a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError
from dsgen.export import provenance, staged_folder

TASK_NAMES = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
              "stsb": "STSBenchmark", "sickr": "SICK-R"}
KNOWN_MODELS = {"minilm-l6": "sentence-transformers/all-MiniLM-L6-v2"}  # embedded encoder -> MTEB model


def import_mteb() -> Any:
    try:
        import mteb
    except ImportError:
        raise DsgenError("dsgen export mteb needs MTEB; install it with: pip install 'dsgen[mteb]'") from None
    return mteb


def model_meta(result: Any) -> Any:
    """MTEB's ModelMeta of the model behind ``result`` (see the module docstring)."""
    mteb = import_mteb()
    from mteb.models import ModelMeta

    known = KNOWN_MODELS.get(result.model) or (result.model if result.method is None and "/" in result.model else None)
    if known:
        try:
            return mteb.get_model_meta(known)
        except (KeyError, ValueError):
            pass
    if result.method is not None:
        name = f"dsgen/{result.method}-{result.preset}-data{result.data_seed}-seed{result.seed}"
        revision = str(result.extra.get("run_key") or "no-run-key")
    else:
        name = "dsgen/" + str(result.model).strip("/").replace("/", "__").replace(":", "_").replace("?", "_")
        revision = str(result.extra.get("evaluation_data", {}).get("fingerprint", "unknown"))[:16]
    return ModelMeta(name=name, revision=revision, release_date=None, languages=["eng-Latn"], loader=None,
                     n_parameters=None, memory_usage_mb=None, max_tokens=None, embed_dim=None, license=None,
                     open_weights=True, public_training_code=None, public_training_data=None,
                     framework=["Sentence Transformers"], reference=None, similarity_fn_name="cosine",
                     use_instructions=False, training_datasets=None, adapted_from=str(result.model))


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


def export_mteb(results: list[Any], out: Path, command: str = "") -> tuple[list[Path], list[str]]:
    """Write every result's tasks in MTEB's layout under ``out`` (atomically); returns (task files, notes)."""
    import json

    mteb = import_mteb()
    from mteb import ResultCache, TaskResult

    written: list[Path] = []
    notes: list[str] = []
    origins: list[dict[str, Any]] = []
    with staged_folder(Path(out)) as stage:
        cache = ResultCache(cache_path=stage)
        for result in results:
            meta = model_meta(result)
            for task, score in result.tasks.items():
                if task not in TASK_NAMES:
                    notes.append(f"{result.method or result.model}: {task} is not an MTEB task; left out")
                    continue
                mteb_task = mteb.get_task(TASK_NAMES[task])
                seconds = float(result.timings.get("evaluate_seconds", result.timings.get("encode_and_score_seconds", 0.0)))
                task_result = TaskResult.from_task_results(mteb_task, {"test": {"default": task_scores(score)}},
                                                           evaluation_time=seconds)
                cache.save_to_cache(task_result, meta)
                path = cache.get_task_result_path(task_result.task_name, meta)
                written.append(Path(out) / path.relative_to(stage))
            origins.append({"model": meta.name, "revision": meta.revision,
                            **provenance(run_key=result.extra.get("run_key"), command=command, dsgen_model=result.model)})
        # beside MTEB's tree, not in it (its loader reads every JSON of a revision folder as a task result)
        (stage / "dsgen_provenance.json").write_text(json.dumps(origins, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return written, notes
