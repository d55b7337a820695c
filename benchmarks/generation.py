"""Generation speed: the batched core against a DINO-style reference loop, side by side in one run.

Both decode the same (x1, label) items of ``sts-x2`` with the same model, sampler and settings
(5 samples per item in one draw, as DINO). The reference decodes one item at a time (its samples
with their counter rows), always for 40 tokens, and cuts at the quote afterwards, as DINO does.

Printed, all measured in this run:
- outputs/s of both loops and their ratio: the headline ratio against the mean time per kept output of two runs of
  the fastest core, one before the reference and one after it, so that the machine's drift over the reference's
  minutes moves both sides alike (each batch size's own ratio, from its run before, is printed too);
- the machine's float32 matrix-multiply peak (a large square GEMM) and the model's FLOPs per
  token, so that row-tokens/s (every row's forwarded token, counter rows and prefill included)
  and useful tokens/s (tokens of kept outputs) read as shares of what this CPU can do;
- row-tokens each kept output costs (counter rows, rejected outputs and prefill make it > 1);
- the bare model's one-token forward at the fastest core's batch (the forward's own ceiling);
- greedy (top-k 1) agreement of core and reference, which must be 100%;
- optionally (``--precision``) a lower-precision copy of the model, opt-in only, with its speed
  and its greedy agreement with float32;
- optionally (``--row-counts``) the core at the fastest batch with decode steps cut into another CPU's
  batch-invariant row counts and the exact-sum softmax, as its probe would choose them (an Intel Xeon with
  AVX-512 and no bf16, its plain kernel: ``16-56,193-512``, README *Generation numerics*): what that CPU's numerics
  cost in speed, measured here (the bits are this CPU's, so only the time means anything), against the
  mean of the core's run before it and another after it;
- optionally (``--plain-weights``) the core at the fastest batch with oneDNN's weights plain, reordered by oneDNN on
  every multiply, instead of packed once ahead (:func:`dsgen.generation.kernels.packed`), where this CPU's probe chose
  oneDNN: what packing saves, timed the same way, and whether the outputs are the same (they must be).

The core runs at each ``--batch-size`` (default 128, the generation default, 256 and 512: a larger
batch admits more groups at once, so fewer, fuller steps); the reference runs once, and the
headline ratio is the fastest core's.

Run: ``dsgen bench generation [--n-inputs 24] [--batch-size 128 --batch-size 512 ...]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LARGER_BATCHES = (256, 512)  # timed besides the generation default (GenerationConfig.batch_size)


def _requests(spec: Any, inputs: list[str], n: int) -> list[Any]:
    from dsgen.generation.outputs import DecodeRequest

    return [DecodeRequest(spec.prompt(lab, x1), tuple(spec.prompt(c, x1) for c in spec.counter_labels[lab]), n)
            for x1 in inputs for lab in spec.labels]


def _stats(results: list[list[Any]], seconds: float) -> dict[str, Any]:
    from dsgen.artifacts import stable_hash

    kept = [o for outs in results for o in outs if o.accepted]
    return {"seconds": round(seconds, 2), "outputs": len(kept), "outputs_per_s": round(len(kept) / seconds, 3),
            "useful_tokens": sum(o.n_tokens for o in kept),
            "useful_tokens_per_s": round(sum(o.n_tokens for o in kept) / seconds, 1),
            "outputs_hash": stable_hash([[[o.text, o.tokens] for o in outs] for outs in results])}


def _per_output(stats: dict[str, Any]) -> float:
    """Seconds per kept output of a timed loop (:func:`_stats`), as its ratios read it (from its outputs/s)."""
    return 1 / max(stats["outputs_per_s"], 1e-9)


def _mean_per_output(*runs: dict[str, Any]) -> float:
    """The mean of :func:`_per_output` over timed runs (of the core before and after another loop: the machine's drift
    during them moves both sides of a ratio to it alike)."""
    return sum(_per_output(r) for r in runs) / len(runs)


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously: a timer stops after this)."""
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def matmul_peak(n: int = 2048, repeats: int = 10, device: Any = "cpu") -> float:
    """GFLOP/s of the best float32 square GEMM (n x n @ n x n) on ``device`` (the one the model decodes on),
    measured now."""
    import torch

    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
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
    """Row-tokens per second of bare one-token forwards at ``batch`` rows attending to ``context + 1``
    columns of transformers' preallocated ``StaticCache`` (nothing but the model's own forward per
    step). The cache holds one real column (position 0) and zeros; what each step computes, and so
    its time, is that of a step after a ``context``-token prompt."""
    import torch
    from transformers import StaticCache

    from dsgen.generation.forward import cache_arg

    ids = torch.full((batch, 1), tokenizer.pad_token_id or 0, dtype=torch.long, device=model.device)
    cache = StaticCache(config=model.config, max_cache_len=context + steps + 1)
    with torch.inference_mode():
        model(input_ids=ids, **cache_arg(model, cache), cache_position=torch.tensor([0], device=model.device),
              use_cache=True, logits_to_keep=1)
        synchronize(model.device)
        start = time.perf_counter()
        for i in range(steps):
            position = torch.tensor([context + i], device=model.device)
            model(input_ids=ids, **cache_arg(model, cache), cache_position=position, use_cache=True, logits_to_keep=1)
        synchronize(model.device)  # on a GPU the steps are only queued until here
        return batch * steps / (time.perf_counter() - start)


def greedy_agreement(model: Any, tokenizer: Any, reqs: list[Any], batch_sizes: Sequence[int], seed: int,
                     other: Any = None) -> dict[int, float]:
    """Per batch size, the share of items whose greedy output is the same
    (:func:`dsgen.generation.reference.same_output`) in the core and in the reference loop (or, with
    ``other``, in the core on ``model`` and the core on ``other``)."""
    from dsgen.generation.decoding import DebiasedDecoder
    from dsgen.generation.outputs import DecodeRequest
    from dsgen.generation.reference import reference_decode, same_output
    from dsgen.generation.sampling import SamplingConfig

    greedy = SamplingConfig(top_k=1)
    items = [DecodeRequest(r.prompt, r.counter_prompts, 1) for r in reqs]
    reference = reference_decode(model, tokenizer, items, greedy, seed=seed) if other is None else None
    agreement = {}
    for batch_size in batch_sizes:
        a = DebiasedDecoder(model, tokenizer, greedy, max_rows=batch_size).decode(items, seed=seed)
        b = reference if reference is not None else DebiasedDecoder(other, tokenizer, greedy,
                                                                    max_rows=batch_size).decode(items, seed=seed)
        agreement[batch_size] = sum(same_output(x[0], y[0]) for x, y in zip(a, b)) / len(items)
    return agreement


def core_run(model: Any, tokenizer: Any, reqs: list[Any], sampling: Any, batch_size: int, seed: int) -> dict[str, Any]:
    """Time the core on ``reqs`` at ``batch_size`` rows; its speed and where its rows went."""
    from dsgen.generation.decoding import DebiasedDecoder

    dec = DebiasedDecoder(model, tokenizer, sampling, max_rows=batch_size)
    start = time.perf_counter()
    out = dec.decode(reqs, seed=seed)
    stats: dict[str, Any] = _stats(out, time.perf_counter() - start)
    rows, kept = dec.stats["forward_rows"], max(stats["outputs"], 1)
    stats.update({
        "batch_size": batch_size, "steps": dec.stats["steps"], "row_tokens": rows,
        "prefill_tokens": dec.stats["prefill_tokens"], "prefill_rows": dec.stats["prefill_rows"],
        "decode_rows_forwarded": rows - dec.stats["prefill_tokens"],
        "decode_rows_unshared": dec.stats["unshared_rows"], "row_forks": dec.stats.get("row_forks", 0),
        "row_tokens_per_s": round(rows / stats["seconds"], 1), "row_tokens_per_kept_output": round(rows / kept, 1),
        "useful_tokens_per_kept_output": round(stats["useful_tokens"] / kept, 1)})
    return stats


def plain_weights_run(model: Any, tokenizer: Any, reqs: list[Any], sampling: Any, batch_size: int,
                      seed: int) -> dict[str, Any]:
    """Time the core with oneDNN's weights plain (:func:`dsgen.generation.probed.assume`), where this CPU's probe has
    its layers run oneDNN's multiply on packed ones: at the row counts the plain multiply is probed invariant at."""
    from dataclasses import replace

    from dsgen.generation.invariance import numerics
    from dsgen.generation.kernels import model_kernels
    from dsgen.generation.probed import assume

    found = numerics(model)
    plain = model_kernels(model, packs=False) if found.kernels.packs else found.kernels
    with assume(replace(found, kernels=plain)):
        stats = core_run(model, tokenizer, reqs, sampling, batch_size, seed)
    stats["packed_in_core"] = found.kernels.packs
    return stats


def other_numerics_run(model: Any, tokenizer: Any, reqs: list[Any], sampling: Any, batch_size: int, seed: int,
                       row_counts: Sequence[int]) -> dict[str, Any]:
    """Time the core as on a CPU whose probe found ``row_counts`` batch-invariant and needed the exact-sum softmax
    (:func:`dsgen.generation.probed.assume`): its steps cut into those counts. Speed only: this CPU's kernels
    are not invariant at those counts, so the outputs are not promised to be the core's."""
    from dataclasses import replace

    from dsgen.generation.invariance import numerics
    from dsgen.generation.kernels import Kernels
    from dsgen.generation.probed import assume

    counts = tuple(sorted(set(row_counts)))  # MKL's counts of that CPU: its blocks run PyTorch's own linear
    with assume(replace(numerics(model), attention="exact-sum", kernels=Kernels(counts))):
        stats = core_run(model, tokenizer, reqs, sampling, batch_size, seed)
    stats["row_counts"] = list(counts)
    return stats


def _ranges(counts: Sequence[int]) -> str:
    """``[16, 17, 18, 256]`` -> ``"16-18,256"``."""
    runs: list[list[int]] = []
    for c in sorted(counts):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


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


def run(generator: str = "smollm2-135m", n_inputs: int = 24, batch_sizes: Sequence[int] | None = None,
        greedy_items: int = 12, data_dir: str | None = None, device: str = "auto", seed: int = 42,
        json_out: Path | None = None, precision: str | None = None, skip_reference: bool = False,
        row_counts: Sequence[int] | None = None, plain_weights: bool = False) -> dict:
    import torch
    from rich.table import Table

    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.data.inputs import load_inputs
    from dsgen.generation.debiased import GenerationConfig
    from dsgen.generation.decoding import DebiasedDecoder
    from dsgen.generation.invariance import numerics
    from dsgen.generation.reference import reference_decode
    from dsgen.generation.sampling import SamplingConfig
    from dsgen.models import load_causal_lm
    from dsgen.taskspec import load_task_spec

    console = make_console()
    batch_sizes = sorted(set(batch_sizes or (GenerationConfig.batch_size, *LARGER_BATCHES)))
    lm = load_causal_lm(generator, device)
    spec = load_task_spec("sts-x2", with_inputs=True)
    inputs = load_inputs("stsb-train-distinct", n_inputs, data_dir)  # the inputs of every earlier measurement
    reqs = _requests(spec, inputs, 5)
    sampling = SamplingConfig()
    peak = matmul_peak(device=lm.model.device)
    fpt = flops_per_token(lm.model)
    # the machine's numerics probe (read from its store, or run here) before any core is timed, so that the first
    # batch size does not pay it (a second process never does: the answer is stored)
    start = time.perf_counter()
    numerics(lm.model)
    probe_seconds = round(time.perf_counter() - start, 2)

    cores = {b: core_run(lm.model, lm.tokenizer, reqs, sampling, b, seed) for b in batch_sizes}
    # the VM's speed drifts: the best of a measurement before and after
    peak = max(peak, matmul_peak(device=lm.model.device))
    for s in cores.values():
        s["row_tokens_share_of_peak"] = round(s["row_tokens_per_s"] * fpt / (peak * 1e9), 3)
        s["useful_tokens_share_of_peak"] = round(s["useful_tokens_per_s"] * fpt / (peak * 1e9), 4)
    best = max(batch_sizes, key=lambda b: cores[b]["outputs_per_s"])
    core_stats = cores[best]
    result: dict[str, Any] = {
        "generator": lm.describe(), "n_inputs": len(inputs), "items": len(reqs), "samples_per_item": 5,
        "batch_sizes": batch_sizes, "batch_size": best, "torch_threads": torch.get_num_threads(),
        "numerics_probe_seconds": probe_seconds,
        "matmul_peak_gflops": round(peak, 1), "model_gflop_per_token": round(fpt / 1e9, 4), "core": core_stats,
        "core_by_batch_size": {str(b): s for b, s in cores.items()}}
    bare = bare_forward(lm.model, lm.tokenizer, best, context=64)
    result["bare_forward_row_tokens_per_s"] = round(bare, 1)
    result["bare_forward_share_of_peak"] = round(bare * fpt / (peak * 1e9), 3)
    result["core_share_of_bare_forward"] = round(core_stats["row_tokens_per_s"] / bare, 3)
    if not skip_reference:
        start = time.perf_counter()
        ref = reference_decode(lm.model, lm.tokenizer, reqs, sampling, seed=seed)
        result["reference"] = _stats(ref, time.perf_counter() - start)
        ref_rate = max(result["reference"]["outputs_per_s"], 1e-9)
        result["speedup_by_batch_size"] = {str(b): round(s["outputs_per_s"] / ref_rate, 2) for b, s in cores.items()}
        # the machine's speed drifts over the reference's minutes (by 20% on this VM): the fastest batch's core runs
        # again after it, and the headline ratio is to the mean of its time per kept output before and after
        after = core_run(lm.model, lm.tokenizer, reqs, sampling, best, seed)
        result["core_after_reference"] = after
        result["speedup_after_reference"] = round(after["outputs_per_s"] / ref_rate, 2)
        result["speedup"] = round(_per_output(result["reference"]) / _mean_per_output(core_stats, after), 2)
    variants = []
    if row_counts:
        variants.append(("core_row_counts", lambda: other_numerics_run(lm.model, lm.tokenizer, reqs, sampling, best,
                                                                      seed, row_counts)))
    if plain_weights:
        variants.append(("core_plain_weights", lambda: plain_weights_run(lm.model, lm.tokenizer, reqs, sampling, best,
                                                                        seed)))
    before = result.get("core_after_reference", core_stats)
    for key, timed in variants:
        # timed between two runs of the core at the same batch (the one before it and another after it), against their
        # mean, so that the machine's drift during the runs moves both sides alike
        other = timed()
        again = core_run(lm.model, lm.tokenizer, reqs, sampling, best, seed)
        other["core_seconds_before_after"] = [before["seconds"], again["seconds"]]
        other["ratio_to_core"] = round(_per_output(other) / _mean_per_output(before, again), 3)
        if key == "core_plain_weights":  # the same outputs by construction (row counts of another CPU: not so)
            other["same_outputs_as_core"] = other["outputs_hash"] == core_stats["outputs_hash"]
        result[key], before = other, again
    if greedy_items:
        agree = greedy_agreement(lm.model, lm.tokenizer, reqs[:greedy_items], batch_sizes, seed)
        result["greedy_agreement_by_batch_size"] = {str(b): round(a, 3) for b, a in agree.items()}
        result["greedy_agreement"] = round(min(agree.values()), 3)
    if precision:
        low = lower_precision(lm.model, precision)
        ldec = DebiasedDecoder(low, lm.tokenizer, sampling, max_rows=best)
        start = time.perf_counter()
        lstats = _stats(ldec.decode(reqs, seed=seed), time.perf_counter() - start)
        lstats["greedy_agreement_with_float32"] = round(
            greedy_agreement(lm.model, lm.tokenizer, reqs[:max(greedy_items, 12)], [best], seed, other=low)[best], 3)
        lstats["speedup_over_float32_core"] = round(lstats["outputs_per_s"] / core_stats["outputs_per_s"], 2)
        result[f"core_{precision}"] = lstats

    table = Table(title=f"generation speed, {generator}, {len(inputs)} inputs x 3 labels x 5 samples")
    for col in ("loop", "kept outputs", "seconds", "outputs/s", "useful tokens/s", "x reference"):
        table.add_column(col, justify="right")
    rows = [("reference (DINO-style)", result.get("reference"), "1")]
    rows += [(f"core, batch {b}", cores[b], str(result.get("speedup_by_batch_size", {}).get(str(b), "-")))
             for b in batch_sizes]
    if "core_after_reference" in result:
        rows.append((f"core, batch {best}, after the reference", result["core_after_reference"],
                     str(result["speedup_after_reference"])))
    if precision:
        rows.append((f"core, batch {best}, {precision} (opt-in)", result[f"core_{precision}"], "-"))
    if plain_weights:
        rows.append((f"core, batch {best}, oneDNN's weights plain", result["core_plain_weights"], "-"))
    if row_counts:
        rows.append((f"core, batch {best}, row counts {_ranges(result['core_row_counts']['row_counts'])}, exact-sum softmax",
                     result["core_row_counts"], "-"))
    for name, s, ratio in rows:
        if s:
            table.add_row(name, str(s["outputs"]), str(s["seconds"]), str(s["outputs_per_s"]), str(s["useful_tokens_per_s"]),
                          ratio)
    console.print(table)
    if "speedup" in result:
        console.print(f"speed-up core / reference: [bold]{result['speedup']}x[/bold] (batch {best}, its core's mean "
                      f"time per kept output before and after the reference: "
                      f"{result['speedup_by_batch_size'][str(best)]}x and {result['speedup_after_reference']}x)")
    console.print(f"matmul peak {result['matmul_peak_gflops']} GFLOP/s; model {result['model_gflop_per_token']} GFLOP/token; "
                  f"core (batch {best}) {core_stats['row_tokens_per_s']} row-tokens/s = "
                  f"{core_stats['row_tokens_share_of_peak']:.0%} of peak, useful {core_stats['useful_tokens_per_s']} "
                  f"tokens/s = {core_stats['useful_tokens_share_of_peak']:.1%} of peak; "
                  f"{core_stats['row_tokens_per_kept_output']} row-tokens per kept output "
                  f"({core_stats['useful_tokens_per_kept_output']} of them kept; {core_stats['prefill_tokens']} prefill "
                  f"tokens in {core_stats['prefill_rows']} rows, {core_stats['decode_rows_forwarded']} decode rows "
                  f"forwarded for {core_stats['decode_rows_unshared']} unshared)")
    console.print(f"bare one-token forward at batch {best}: {result['bare_forward_row_tokens_per_s']} row-tokens/s "
                  f"({result['bare_forward_share_of_peak']:.0%} of peak); the core runs at "
                  f"{result['core_share_of_bare_forward']:.0%} of it")
    if "greedy_agreement" in result:
        console.print(f"greedy (top-k 1) agreement core vs reference: {result['greedy_agreement']:.0%} of {greedy_items} "
                      f"items (lowest over batch sizes {', '.join(map(str, batch_sizes))})")
    if row_counts:
        c = result["core_row_counts"]
        console.print(f"with row counts {_ranges(c['row_counts'])} and the exact-sum softmax the core (batch {best}) "
                      f"takes {c['ratio_to_core']}x the core's time per kept output ({c['seconds']} s against "
                      f"{' and '.join(map(str, c['core_seconds_before_after']))} s before and after it), forwarding "
                      f"{c['row_tokens']} row-tokens for {core_stats['row_tokens']}")
    if plain_weights:
        c = result["core_plain_weights"]
        around = " and ".join(map(str, c["core_seconds_before_after"]))
        console.print(f"with oneDNN's weights plain the core (batch {best}) takes {c['ratio_to_core']}x the core's "
                      f"time per kept output ({c['seconds']} s against {around} s before and after it; the core's "
                      f"weights packed: {c['packed_in_core']}), the same outputs: {c['same_outputs_as_core']}")
    if json_out:
        write_json(json_out, result)
    return result
