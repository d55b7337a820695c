"""``dsgen.generate``: one labelled pair dataset, with self-debiased decoding (DINO) or through an OpenAI-compatible
endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.scheduling.placement import Placement


@dataclass
class Generated:
    """What :func:`generate` hands back.

    Attributes:
        path: the JSONL written (its ``.meta.json`` sidecar beside it).
        pairs: the :class:`~dsgen.data.pairs.Pair` objects written.
        description: which generator made them, as ``dsgen generate`` says it (the model, its load time and
            dequantised cache; or the endpoint).
    """

    path: Path
    pairs: list[Any] = field(repr=False)
    description: str = ""


def generate(*, out: str | Path = "pairs.jsonl", task: str | None = None, inputs: str | None = None,
             max_inputs: int | None = None, per_label: int | None = None, max_attempts: int | None = None,
             entries_per_label: int | None = None, generator: str | None = None, base_url: str | None = None,
             decay: float | None = None, top_k: int | None = None, top_p: float | None = None,
             max_new_tokens: int | None = None, counter_labels: bool = True, batch_size: int | None = None,
             chunk_inputs: int | None = None, device: str | None = None, dtype: str | None = None,
             backend: str = "local", address: str | None = None, workers: int | None = None,
             cpus_per_worker: int | None = None, data_dir: str | None = None, data_seed: int | None = None,
             fresh: bool = False, overwrite: bool = False, progress: bool = True) -> Generated:
    """Generate a labelled pair dataset into ``out``, resuming finished chunks unless ``fresh``.

    Every setting left None is :class:`~dsgen.generation.debiased.GenerationConfig`'s default (``dsgen generate
    --help`` shows them): ``decay`` is the self-debiasing decay constant lambda, ``data_seed`` the seed the dataset
    is generated with, ``counter_labels=False`` ignores the task spec's counter labels. An existing ``out`` is
    replaced only when dsgen wrote it, and never when it is ``inputs``, unless ``overwrite``. ``generator="openai:<model>"``
    sends the same settings to an OpenAI-compatible endpoint at ``base_url`` (no self-debiasing). ``backend`` and its
    Ray settings say where the chunks decode (:class:`~dsgen.scheduling.placement.Placement`).

    Example:
        >>> dsgen.generate(task="sts-x2", inputs="stsb-train", max_inputs=100, out="pairs.jsonl")  # doctest: +SKIP
    """
    from dsgen.artifacts import check_replaceable_file, check_writable_target
    from dsgen.data.inputs import load_inputs
    from dsgen.generation import GENERATORS, GenerationContext
    from dsgen.orchestration import check_overrides
    from dsgen.taskspec import load_task_spec

    out = Path(out)
    # only what the caller set: every other value is the config class's default
    ov = check_overrides(generator, base_url=base_url)
    sampling = {k: v for k, v in dict(decay_constant=decay, top_k=top_k, top_p=top_p,
                                      max_new_tokens=max_new_tokens).items() if v is not None}
    given = {k: v for k, v in dict(task=task, generator=None if ov.api_model is not None else generator,
                                   per_label=per_label, max_attempts=max_attempts, entries_per_label=entries_per_label,
                                   batch_size=batch_size, chunk_inputs=chunk_inputs, device=device, dtype=dtype,
                                   seed=data_seed).items() if v is not None}
    if not counter_labels:
        given["counter_labels"] = False
    cls = GENERATORS.get("debiased")
    cfg = cls.config_class.from_dict({**given, **({"sampling": sampling} if sampling else {})}).check()
    load_task_spec(cfg.task, with_inputs=inputs is not None)  # validate before loading anything heavy
    if ov.api_model is not None:  # the same settings, through an OpenAI-compatible endpoint
        cls = GENERATORS.get("openai")
        settings, _ = cls.adapt(cfg, "these settings")
        cfg = cls.config_class.from_dict({**settings, "model": ov.api_model, "base_url": base_url or ""}).check()
    check_writable_target(out)
    check_replaceable_file(out, overwrite, (inputs,))
    texts = load_inputs(inputs, max_inputs, data_dir) if inputs is not None else None
    placement = Placement(backend, address, workers, cpus_per_worker)
    context = GenerationContext(data_dir=data_dir, backend=placement.generation_backend(device), progress=progress)
    gen = cls.build(cfg, context)
    if ov.api_model is not None:
        pairs = gen.generate(texts, out, progress=progress, resume=not fresh)
        return Generated(out, pairs, f"openai generator, model {ov.api_model} at {gen.base_url}")
    with placement.computing():  # --cpus-per-worker: this process's threads when it decodes here
        if gen.backend is None:
            gen.lm  # load (and fail on a bad model or device) before anything is written
        pairs = gen.generate(texts, out, progress=progress, resume=not fresh)
    lm = gen.lm.describe() if gen.backend is None else {"name": cfg.generator, "load_seconds": "-",
                                                         "dequantised_cache_hit": True}
    return Generated(out, pairs, f"generator {lm['name']}, loaded in {lm['load_seconds']} s, "
                                 f"dequantised cache {'hit' if lm['dequantised_cache_hit'] else 'built'}")


__all__ = ["Generated", "generate"]
