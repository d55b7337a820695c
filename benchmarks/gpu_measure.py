"""The GPU check's measurements: generation, training and evaluation throughput on one device, each through
dsgen's own code path, at the settings a preset's plan resolves (read from the plan, never copied).

- :func:`generation`: dsgen's decoder (:func:`dsgen.benchmarks.generation.core_run`, at the preset's batch and a
  larger one), DINO's reference loop (:func:`dsgen.generation.reference.reference_decode`) and ``transformers``'
  ``generate`` (plain sampling with the same top-k, top-p, temperature and length, no self-debiasing: one row per
  sample, no counter rows, so an upper bound on what a library loop gives) on the same requests and model. A random
  model never closes its quotation mark, so every sample runs the full ``max_new_tokens``: the decoder's time per
  output is an upper bound on a trained model's (which stops at the quote), the reference loop's is exact (it
  always decodes ``max_new_tokens``, as DINO's code).
- :func:`training`: a trainer of :data:`dsgen.training.base.TRAINERS` (``regression``, ``contrastive``) through its
  own ``train`` on STSb train pairs, model selection off (its evaluations are costed through :func:`evaluation`);
  a warm-up run first, untimed.
- :func:`evaluation`: :class:`dsgen.evaluation.evaluator.StsEvaluator` on the preset's tasks (the comparison's
  first run, tokenising, and a later one, token cache warm; at further token budgets), and the model-selection
  evaluator the trainers use (sentence-transformers' ``EmbeddingSimilarityEvaluator``) on STSb dev.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .generation import _requests, _stats, bare_forward, core_run, flops_per_token, greedy_agreement, synchronize


def timed(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - start


def gemm_peak(device: str, dtype: str, n: int, repeats: int = 5) -> float:
    """TFLOP/s of this device's best square matrix multiply (``n`` x ``n``) in ``dtype``, measured now: what
    "share of peak" is read against."""
    import torch

    from dsgen.models import resolve_dtype

    a = torch.randn(n, n, device=device, dtype=resolve_dtype(dtype))
    b = torch.randn(n, n, device=device, dtype=resolve_dtype(dtype))
    timed(lambda: a @ b, device)  # warm-up
    best = min(timed(lambda: a @ b, device)[1] for _ in range(repeats))
    return 2 * n**3 / best / 1e12


def _per_output(stats: dict[str, Any], decoded: int) -> dict[str, Any]:
    seconds = max(float(stats["seconds"]), 1e-9)
    stats.update(decoded_outputs=decoded, decoded_outputs_per_s=round(decoded / seconds, 3),
                 seconds_per_output=round(seconds / max(decoded, 1), 6))
    return stats


def reference_run(model: Any, tokenizer: Any, reqs: list[Any], sampling: Any, seed: int, cap_s: float,
                  device: str) -> dict[str, Any]:
    """DINO's reference loop: one item first (warm-up and calibration, untimed in the result), then as many of the
    next items as fit in ``cap_s`` seconds at that pace, timed in one call (items are independent: the loop decodes
    one at a time, so the time per output does not depend on how many are decoded)."""
    from dsgen.generation.reference import reference_decode

    _, first = timed(lambda: reference_decode(model, tokenizer, reqs[:1], sampling, seed=seed), device)
    k = max(1, min(len(reqs) - 1, int(cap_s / max(first, 1e-9))))
    rest = reqs[1:1 + k] or reqs[:1]
    out, seconds = timed(lambda: reference_decode(model, tokenizer, rest, sampling, seed=seed), device)
    stats = _stats(out, seconds)
    stats.update(items=len(rest), calibration_item_seconds=round(first, 3), cap_seconds=round(cap_s, 1))
    return _per_output(stats, sum(len(o) for o in out))


def hf_generate_run(model: Any, tokenizer: Any, reqs: list[Any], sampling: Any, rows: int, seed: int,
                    device: str) -> dict[str, Any]:
    """``model.generate``: plain sampling of every request's ``n`` samples (``num_return_sequences``), at most
    ``rows`` rows a call, left-padded; the same top-k, top-p, temperature and ``max_new_tokens``, and as many new
    tokens as DINO (``min_new_tokens`` too when the sampling suppresses the end of text). No counter rows, no
    self-debiasing, no early stop at a quote."""
    import torch

    n = reqs[0].n
    per_call = max(1, rows // n)
    length = sampling.max_new_tokens
    kwargs: dict[str, Any] = dict(do_sample=True, top_k=sampling.top_k, top_p=sampling.top_p,
                                  temperature=sampling.temperature, max_new_tokens=length, num_return_sequences=n,
                                  pad_token_id=tokenizer.pad_token_id)
    if sampling.suppress_eos:
        kwargs["min_new_tokens"] = length

    def run(prompts: list[str], **over: Any) -> int:
        made = 0
        with torch.inference_mode():
            for i in range(0, len(prompts), per_call):
                enc = tokenizer(prompts[i:i + per_call], return_tensors="pt", padding=True).to(device)
                out = model.generate(**enc, **{**kwargs, **over})
                made += out.shape[0] * (out.shape[1] - enc["input_ids"].shape[1])
        return made

    prompts = [r.prompt for r in reqs]
    run(prompts[:1], max_new_tokens=2, min_new_tokens=None)  # warm-up
    torch.manual_seed(seed)
    new_tokens, seconds = timed(lambda: run(prompts), device)
    stats = {"seconds": round(seconds, 2), "rows_per_call": per_call * n, "calls": -(-len(prompts) // per_call),
             "new_tokens": new_tokens, "new_tokens_per_s": round(new_tokens / seconds, 1)}
    return _per_output(stats, len(prompts) * n)


def generation(built: Any, plan: Any, inputs: list[str], batch_sizes: Sequence[int], seed: int, reference_cap_s: float,
               greedy_items: int, device: str, peak_tflops: float | None = None,
               time_left: Callable[[], float] | None = None) -> dict[str, Any]:
    """The three loops on ``plan``'s task, samples per label and sampling (``plan.generation``) over ``inputs``.
    A batch size after the first runs only while ``time_left()`` is over 4x what the first took (the budget guard:
    the first batch size, the preset's, is what the cost model reads)."""
    from dsgen.taskspec import load_task_spec

    model, tok, gen = built.model, built.tokenizer, plan.generation
    spec = load_task_spec(gen.task, with_inputs=True)
    reqs = _requests(spec, inputs, gen.per_label)
    decoded = sum(r.n for r in reqs)
    sampling = gen.sampling
    fpt = flops_per_token(model)
    core_run(model, tok, reqs[:1], sampling.replace(max_new_tokens=4), batch_sizes[0], seed)  # warm-up, untimed
    cores: dict[str, Any] = {}
    skipped: list[int] = []
    for b in batch_sizes:
        if cores and time_left is not None and time_left() < 4 * cores[str(batch_sizes[0])]["seconds"]:
            skipped.append(b)
            continue
        s = _per_output(core_run(model, tok, reqs, sampling, b, seed), decoded)
        s["row_tflops"] = round(s["row_tokens_per_s"] * fpt / 1e12, 3)
        cores[str(b)] = s
    batch_sizes = [b for b in batch_sizes if b not in skipped]
    result: dict[str, Any] = {
        "task": gen.task, "samples_per_item": gen.per_label, "inputs": len(inputs), "items": len(reqs),
        "decoded_outputs": decoded, "sampling": sampling.to_dict(), "preset_batch_size": gen.batch_size,
        "batch_sizes": list(batch_sizes), "batch_sizes_skipped_for_time": skipped,
        "model_gflop_per_token": round(fpt / 1e9, 4), "core": cores}
    result["reference"] = reference_run(model, tok, reqs, sampling, seed, reference_cap_s, device)
    result["hf_generate"] = {str(b): hf_generate_run(model, tok, reqs, sampling, b, seed, device) for b in batch_sizes}
    best = max(cores, key=lambda b: cores[b]["decoded_outputs_per_s"])
    ref_rate = max(result["reference"]["decoded_outputs_per_s"], 1e-9)
    result["speedup_core_over_reference"] = {b: round(s["decoded_outputs_per_s"] / ref_rate, 2) for b, s in cores.items()}
    result["core_over_hf_generate"] = {b: round(cores[b]["decoded_outputs_per_s"] /
                                                max(result["hf_generate"][b]["decoded_outputs_per_s"], 1e-9), 3)
                                       for b in cores}
    try:
        bare = bare_forward(model, tok, int(best), context=64)
        result["bare_forward_row_tokens_per_s"] = round(bare, 1)
        result["core_share_of_bare_forward"] = round(cores[best]["row_tokens_per_s"] / bare, 3)
    except Exception as exc:  # a ceiling, not a measurement the cost model needs
        result["bare_forward_error"] = f"{type(exc).__name__}: {exc}"
    if peak_tflops:
        result["core_share_of_gemm_peak"] = {b: round(s["row_tflops"] / peak_tflops, 3) for b, s in cores.items()}
    if greedy_items:
        agree = greedy_agreement(model, tok, reqs[:greedy_items], [int(b) for b in batch_sizes], seed)
        result["greedy_agreement_with_reference"] = {str(b): round(a, 3) for b, a in agree.items()}
    return result


def sts_pairs(data_dir: str | None) -> list[tuple[str, str, float]]:
    """STSb train pairs (sentence 1, sentence 2, gold / 5): real sentence lengths to train on."""
    from dsgen.data.sts import data_dir as resolve, read_stsb

    train = read_stsb(resolve(data_dir), "train")
    return [(a, b, s / 5.0) for a, b, s in zip(train.sentences1, train.sentences2, train.scores)]


def training_pairs(trainer: str, pairs: list[tuple[str, str, float]], sentences: list[str], n: int) -> list[Any]:
    """``n`` training examples for ``trainer``: STSb's labelled pairs (regression), or (x, entailment, contradiction)
    triplets of three distinct sentences each, given as labelled pairs (contrastive: its batches admit no sentence
    twice, so triplets that share none fill every batch, as a method's own triplets do)."""
    from dsgen.data.pairs import Pair

    if trainer == "regression":
        return [Pair(a, b, y) for a, b, y in (pairs[i % len(pairs)] for i in range(n))]
    out = []
    for i in range(n):
        a, b, c = (sentences[(3 * i + k) % len(sentences)] for k in range(3))
        out += [Pair(a, b, "entailment"), Pair(a, c, "contradiction")]
    return out


def mean_tokens(encoder: Any, texts: list[str]) -> float:
    """Mean tokens per text under ``encoder``'s tokenizer, special tokens included, cut at its max length."""
    tok = encoder.tokenizer
    limit = encoder.max_seq_length or 10**9
    lengths = [min(len(ids), limit) for ids in tok(texts[:2000])["input_ids"]]
    return round(sum(lengths) / max(len(lengths), 1), 2)


def training(folder: str, plan: Any, steps: int, warmup_steps: int, pairs: list[tuple[str, str, float]],
             sentences: list[str], seed: int, device: str) -> dict[str, Any]:
    """``plan``'s trainer, on the encoder in ``folder``, for ``steps`` optimizer steps at the plan's batch size
    (one epoch of ``steps`` x batch examples), after an untimed warm-up of ``warmup_steps``."""
    from dsgen.training.base import TRAINERS

    trainer = plan.trainer
    cfg = trainer.config.replace(encoder=folder, device=device, model_selection=False, epochs=1.0)
    if hasattr(cfg, "nli_file"):
        cfg = cfg.replace(nli_file=None)
    cls = TRAINERS.get(trainer.name)
    settings = {k: v for k, v in cfg.to_dict().items()
                if k in ("batch_size", "mini_batch_size", "max_seq_length", "optimizer", "prompt", "loss", "temperature")}

    def run(n_steps: int) -> dict[str, Any]:
        data = training_pairs(trainer.name, pairs, sentences, n_steps * cfg.batch_size)
        start = time.perf_counter()
        stage = cls(cfg)
        outcome = stage.train(data, [], seed, progress=False)
        synchronize(device)
        log = dict(outcome.log)
        log["wall_seconds"] = round(time.perf_counter() - start, 2)
        template = getattr(stage, "template", lambda text: text)  # GenSE's prompt wraps every sentence it encodes
        log["tokens_per_sentence"] = mean_tokens(outcome.model, [template(p.text_a) for p in data])
        del outcome
        return log

    warm = run(warmup_steps)
    log = run(steps)
    seconds = max(float(log["train_seconds"]), 1e-9)
    examples = int(log["train_examples"])
    done = max(int(log["optimizer_steps"]), 1)
    unit = log.get("train_unit", "pairs")
    return {"trainer": trainer.name, "method": plan.method.name, "settings": settings, "unit": unit,
            "examples": examples, "optimizer_steps": log["optimizer_steps"], "seconds": round(seconds, 2),
            "examples_per_s": round(examples / seconds, 2), "seconds_per_step": round(seconds / done, 4),
            "seconds_per_example": round(seconds / max(examples, 1), 6),
            "load_and_setup_seconds": round(log["wall_seconds"] - seconds, 2),
            "tokens_per_sentence": log["tokens_per_sentence"],
            "warmup": {"optimizer_steps": warm["optimizer_steps"], "seconds": warm["train_seconds"]}}


def evaluation(folder: str, tasks: list[str], data_dir: str | None, dtype: str, token_budgets: Sequence[int],
               device: str, selection_pairs: int | None = None) -> dict[str, Any]:
    """The test-set evaluator and the model-selection evaluator, timed on the encoder in ``folder``."""
    from dsgen.encoders import load_encoder
    from dsgen.evaluation import evaluator as evaluation_module
    from dsgen.evaluation.evaluator import TOKEN_BUDGET, StsEvaluator, token_plan
    from dsgen.training.fit import stsb_dev_pairs, validation_evaluator

    encoder = load_encoder(folder, device)
    ev = StsEvaluator(tasks, data_dir, dtype=dtype)
    distinct = ev.distinct_sentences()
    ev.distinct_rows()
    encoder.encode(distinct[:64], batch_size=64)  # warm-up, untimed
    evaluation_module._TOKENS.clear()  # a comparison's first run: nothing tokenised yet
    _, first = timed(lambda: ev.evaluate(encoder, "random"), device)
    _, later = timed(lambda: ev.evaluate(encoder, "random"), device)  # token cache warm, as a comparison's later runs
    n = len(distinct)
    result: dict[str, Any] = {
        "tasks": list(tasks), "dtype": dtype, "pairs": sum(len(p) for p in ev.pairs.values()), "distinct_sentences": n,
        "tokens_per_sentence": mean_tokens(encoder, distinct),
        "first_run": {"seconds": round(first, 2), "sentences_per_s": round(n / first, 1)},
        "later_run": {"seconds": round(later, 2), "sentences_per_s": round(n / later, 1)},
        "token_budget": TOKEN_BUDGET, "by_token_budget": {str(TOKEN_BUDGET): round(n / later, 1)}}
    for budget in token_budgets:
        if budget == TOKEN_BUDGET:
            continue
        token_plan(encoder, distinct, budget)  # tokenised beforehand: a later run's speed at this batch shape
        ev.token_budget = budget
        _, seconds = timed(lambda: ev.evaluate(encoder, "random"), device)
        result["by_token_budget"][str(budget)] = round(n / seconds, 1)
    ev.token_budget = TOKEN_BUDGET
    dev = stsb_dev_pairs(data_dir)[:selection_pairs]
    select, metric = validation_evaluator([a for a, _, _ in dev], [b for _, b, _ in dev], [y for _, _, y in dev], "max")
    _, seconds = timed(lambda: select(encoder), device)
    result["selection"] = {"evaluator": "sentence-transformers EmbeddingSimilarityEvaluator (dsgen.training.fit."
                                        "validation_evaluator, as the trainers select)",
                           "pairs": len(dev), "sentences": 2 * len(dev), "seconds": round(seconds, 2),
                           "sentences_per_s": round(2 * len(dev) / seconds, 1)}
    return result
