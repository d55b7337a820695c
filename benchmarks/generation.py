"""Generation speed: the batched core against a DINO-style reference loop, side by side in one run.

Both decode the same (x1, label) items of ``sts-x2`` with the same model, sampler and settings
(5 samples per item in one draw, as DINO). The reference decodes one item at a time (its samples
with their counter rows), always for 40 tokens, and cuts at the quote afterwards, as DINO does.

Printed, all measured in this run:
- outputs/s of both loops and their ratio;
- the machine's float32 matrix-multiply peak (a large square GEMM) and the model's FLOPs per
  token, so that row-tokens/s (every row's forwarded token, counter rows and prefill included)
  and useful tokens/s (tokens of kept outputs) read as shares of what this CPU can do;
- row-tokens each kept output costs (counter rows, rejected outputs and prefill make it > 1);
- the bare model's one-token forward at the core's batch (the forward's own ceiling);
- greedy (top-k 1) agreement of core and reference, which must be 100%;
- optionally (``--precision``) a lower-precision copy of the model, opt-in only, with its speed
  and its greedy agreement with float32.

Run: ``dsgen bench generation [--n-inputs 24] [--batch-size 256]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def _requests(spec: Any, inputs: list[str], n: int) -> list[Any]:
    from dsgen.generation.decoding import DecodeRequest

    return [DecodeRequest(spec.prompt(lab, x1), tuple(spec.prompt(c, x1) for c in spec.counter_labels[lab]), n)
            for x1 in inputs for lab in spec.labels]


def _stats(results: list[list[Any]], seconds: float) -> dict[str, float]:
    kept = [o for outs in results for o in outs if o.accepted]
    return {"seconds": round(seconds, 2), "outputs": len(kept), "outputs_per_s": round(len(kept) / seconds, 3),
            "useful_tokens": sum(o.n_tokens for o in kept),
            "useful_tokens_per_s": round(sum(o.n_tokens for o in kept) / seconds, 1)}


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of this machine's best float32 square GEMM (n x n @ n x n), measured now."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def flops_per_token(model: Any) -> float:
    """Forward FLOPs per token: 2 per weight of every matrix multiply (the input embedding is a
    lookup; a tied output head still multiplies)."""
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    params = sum(p.numel() for p in model.parameters())
    tied = emb.data_ptr() == head.data_ptr()
    return 2.0 * (params - (0 if tied else emb.numel()))


def bare_forward(model: Any, tokenizer: Any, batch: int, context: int, steps: int = 8) -> float:
    """Row-tokens per second of bare one-token forwards at ``batch`` rows and ``context`` cached tokens,
    with transformers' preallocated ``StaticCache`` (nothing but the model's own forward per step)."""
    import torch
    from transformers import StaticCache

    ids = torch.full((batch, context), tokenizer.pad_token_id or 0, dtype=torch.long, device=model.device)
    cache = StaticCache(config=model.config, max_cache_len=context + steps + 1)
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        step_ids = ids[:, :1]
        start = time.perf_counter()
        for i in range(steps):
            position = torch.tensor([context + i], device=model.device)
            model(input_ids=step_ids, past_key_values=cache, cache_position=position, use_cache=True, logits_to_keep=1)
        return batch * steps / (time.perf_counter() - start)


def greedy_agreement(model: Any, tokenizer: Any, reqs: list[Any], batch_size: int, seed: int,
                     other: Any = None) -> float:
    """Share of items whose greedy output is the same in the core and in the reference loop (or, with
    ``other``, in the core on ``model`` and the core on ``other``)."""
    from dsgen.generation.decoding import DebiasedDecoder, DecodeRequest, SamplingConfig, reference_decode

    greedy = SamplingConfig(top_k=1)
    items = [DecodeRequest(r.prompt, r.counter_prompts, 1) for r in reqs]
    a = DebiasedDecoder(model, tokenizer, greedy, max_rows=batch_size).decode(items, seed=seed)
    if other is None:
        b = reference_decode(model, tokenizer, items, greedy, seed=seed)
    else:
        b = DebiasedDecoder(other, tokenizer, greedy, max_rows=batch_size).decode(items, seed=seed)
    return sum(x[0].tokens == y[0].tokens for x, y in zip(a, b)) / len(items)


def lower_precision(model: Any, precision: str) -> Any:
    """An opt-in lower-precision copy: ``int8`` (dynamic quantisation of the linear layers) or ``bfloat16``."""
    import copy

    import torch

    if precision == "bfloat16":
        return copy.deepcopy(model).to(torch.bfloat16)
    if precision == "int8":
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
    from dsgen.errors import DsgenError

    raise DsgenError(f"--precision must be int8 or bfloat16 (got '{precision}')")


def run(generator: str = "smollm2-135m", n_inputs: int = 24, batch_size: int = 256, greedy_items: int = 12,
        data_dir: str | None = None, device: str = "auto", seed: int = 42, json_out: Path | None = None,
        precision: str | None = None, skip_reference: bool = False) -> dict:
    import torch
    from rich.table import Table

    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.data.inputs import load_inputs
    from dsgen.generation.decoding import DebiasedDecoder, SamplingConfig, reference_decode
    from dsgen.models import load_causal_lm
    from dsgen.taskspec import load_task_spec

    console = make_console()
    lm = load_causal_lm(generator, device)
    spec = load_task_spec("sts-x2", with_inputs=True)
    inputs = load_inputs("stsb-train", n_inputs, data_dir)
    reqs = _requests(spec, inputs, 5)
    sampling = SamplingConfig()
    peak = matmul_peak()
    fpt = flops_per_token(lm.model)

    dec = DebiasedDecoder(lm.model, lm.tokenizer, sampling, max_rows=batch_size)
    start = time.perf_counter()
    core = dec.decode(reqs, seed=seed)
    core_stats = _stats(core, time.perf_counter() - start)
    core_stats["row_tokens"] = dec.stats["forward_rows"]
    core_stats["row_tokens_per_s"] = round(dec.stats["forward_rows"] / core_stats["seconds"], 1)
    core_stats["row_tokens_per_kept_output"] = round(dec.stats["forward_rows"] / max(core_stats["outputs"], 1), 1)
    core_stats["useful_tokens_per_kept_output"] = round(core_stats["useful_tokens"] / max(core_stats["outputs"], 1), 1)
    core_stats["row_tokens_share_of_peak"] = round(core_stats["row_tokens_per_s"] * fpt / (peak * 1e9), 3)
    core_stats["useful_tokens_share_of_peak"] = round(core_stats["useful_tokens_per_s"] * fpt / (peak * 1e9), 4)

    result: dict[str, Any] = {
        "generator": lm.describe(), "n_inputs": len(inputs), "items": len(reqs), "samples_per_item": 5,
        "batch_size": batch_size, "torch_threads": torch.get_num_threads(),
        "matmul_peak_gflops": round(peak, 1), "model_gflop_per_token": round(fpt / 1e9, 4), "core": core_stats}
    bare = bare_forward(lm.model, lm.tokenizer, batch_size, context=64)
    result["bare_forward_row_tokens_per_s"] = round(bare, 1)
    result["bare_forward_share_of_peak"] = round(bare * fpt / (peak * 1e9), 3)
    result["core_share_of_bare_forward"] = round(core_stats["row_tokens_per_s"] / bare, 3)
    if not skip_reference:
        start = time.perf_counter()
        ref = reference_decode(lm.model, lm.tokenizer, reqs, sampling, seed=seed)
        result["reference"] = _stats(ref, time.perf_counter() - start)
        result["speedup"] = round(core_stats["outputs_per_s"] / max(result["reference"]["outputs_per_s"], 1e-9), 2)
    if greedy_items:
        result["greedy_agreement"] = round(greedy_agreement(lm.model, lm.tokenizer, reqs[:greedy_items], batch_size, seed), 3)
    if precision:
        low = lower_precision(lm.model, precision)
        ldec = DebiasedDecoder(low, lm.tokenizer, sampling, max_rows=batch_size)
        start = time.perf_counter()
        lstats = _stats(ldec.decode(reqs, seed=seed), time.perf_counter() - start)
        lstats["greedy_agreement_with_float32"] = round(
            greedy_agreement(lm.model, lm.tokenizer, reqs[:max(greedy_items, 12)], batch_size, seed, other=low), 3)
        lstats["speedup_over_float32_core"] = round(lstats["outputs_per_s"] / core_stats["outputs_per_s"], 2)
        result[f"core_{precision}"] = lstats

    table = Table(title=f"generation speed, {generator}, {len(inputs)} inputs x 3 labels x 5 samples")
    for col in ("loop", "kept outputs", "seconds", "outputs/s", "useful tokens/s"):
        table.add_column(col, justify="right")
    rows = [("reference (DINO-style)", result.get("reference")), (f"core (batch {batch_size})", core_stats)]
    if precision:
        rows.append((f"core, {precision} (opt-in)", result[f"core_{precision}"]))
    for name, s in rows:
        if s:
            table.add_row(name, str(s["outputs"]), str(s["seconds"]), str(s["outputs_per_s"]), str(s["useful_tokens_per_s"]))
    console.print(table)
    if "speedup" in result:
        console.print(f"speed-up core / reference: [bold]{result['speedup']}x[/bold]")
    console.print(f"matmul peak {result['matmul_peak_gflops']} GFLOP/s; model {result['model_gflop_per_token']} GFLOP/token; "
                  f"core {core_stats['row_tokens_per_s']} row-tokens/s = {core_stats['row_tokens_share_of_peak']:.0%} of peak, "
                  f"useful {core_stats['useful_tokens_per_s']} tokens/s = {core_stats['useful_tokens_share_of_peak']:.1%} of peak; "
                  f"{core_stats['row_tokens_per_kept_output']} row-tokens per kept output "
                  f"({core_stats['useful_tokens_per_kept_output']} of them kept)")
    console.print(f"bare one-token forward at batch {batch_size}: {result['bare_forward_row_tokens_per_s']} row-tokens/s "
                  f"({result['bare_forward_share_of_peak']:.0%} of peak); the core runs at "
                  f"{result['core_share_of_bare_forward']:.0%} of it")
    if "greedy_agreement" in result:
        console.print(f"greedy (top-k 1) agreement core vs reference: {result['greedy_agreement']:.0%} of {greedy_items} items")
    if json_out:
        write_json(json_out, result)
    return result
