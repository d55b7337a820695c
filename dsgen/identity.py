"""The identity of every artefact: one key function per kind, used by everything that caches.

| artefact | key | what goes in |
| --- | --- | --- |
| generated dataset | :func:`dataset_key` | generator name, its coerced config, the task spec actually used, the inputs, the generator model's fingerprint |
| run result | :func:`run_key` | the resolved plan (coerced configs), the fingerprint of every model it names, the evaluation data's fingerprint |
| result folder | :func:`variant_key` | what the user asked for except the seeds: method recipe, every resolved (coerced) setting of the plan, command-line overrides |
| zero-shot discriminator score | :func:`score_key` | the scoring model's fingerprint, the prompt, the pair |
| exported file | :func:`content_key` | the rows it holds |

Configs are hashed through ``Config.to_dict()``, which coerces values to their field types, so
``100`` and ``100.0`` give one key. Model fingerprints come from :func:`dsgen.models.model_fingerprint`
(file size + mtime + name for local files, package version for embedded models, revision when
known for Hub ids), so a changed local file or an upgraded model package changes the key.
"""

from __future__ import annotations

from typing import Any

from dsgen.artifacts import stable_hash


def dataset_key(generator: str, config: dict[str, Any], inputs: list[str] | None,
                spec: dict[str, Any] | None = None, model: dict[str, Any] | None = None) -> str:
    """The cache key of a generated dataset.

    Args:
        generator: the generator's registry name (a plug-in never reuses another generator's file).
        config: the generator's coerced config (``Config.to_dict()``).
        inputs: the input texts x1 (None for tasks without inputs).
        spec: the task spec as used (after counter labels are turned off, if they are).
        model: the generator model's fingerprint.
    """
    return stable_hash({"generator": generator, "config": config, "spec": spec, "inputs": inputs, "model": model})


def run_key(plan: dict[str, Any], models: dict[str, Any], data: str) -> str:
    """The key of one run's result: the resolved plan, its models' fingerprints and the data's fingerprint."""
    return stable_hash({"plan": plan, "models": models, "data": data})


def variant_key(method: dict[str, Any], plan: dict[str, Any], overrides: dict[str, Any]) -> str:
    """Names the folder of a method's results: everything the user chose except the seeds (the
    method's recipe, the resolved plan without its seeds, the command-line overrides)."""
    return stable_hash({"method": method, "plan": plan, "overrides": overrides}, length=10)


def score_key(model: dict[str, Any], prompt: str, x1: str, x2: str) -> str:
    """Key of one zero-shot discriminator score (the scoring model, its prompt, the pair)."""
    return stable_hash({"model": model, "prompt": prompt, "pair": [x1, x2]}, length=24)


def content_key(rows: Any, length: int = 12) -> str:
    """Names an exported file by the rows it holds (a dataset folder's Parquet splits)."""
    return stable_hash(rows, length=length)
