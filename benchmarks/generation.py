"""Generation speed: the batched core against a DINO-style reference loop, in one run.

Both decode the same (x1, label) items of ``sts-x2`` with the same model and sampling
settings. The reference decodes one item at a time (its 2 samples with their counter rows),
always for 40 tokens, and cuts at the quote afterwards, as DINO does. Printed: outputs/s of
both and their ratio, useful tokens/s (tokens of kept outputs), the core's share of the bare
model's forward throughput at the same batch size (this machine's roofline), and the share of
items whose greedy (top-k 1) output is the same in both loops.

Run: ``dsgen bench generation [--n-inputs 24] [--batch-size 128]``.
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
            "useful_tokens_per_s": round(sum(o.n_tokens for o in kept) / seconds, 1)}


def roofline(model: Any, tokenizer: Any, batch: int, context: int, steps: int = 8) -> float:
    """Row-tokens per second of bare one-token forwards at ``batch`` rows and ``context`` cached tokens."""
    import torch
    from transformers import DynamicCache

    ids = torch.full((batch, context), tokenizer.pad_token_id or 0, dtype=torch.long, device=model.device)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        step_ids = ids[:, :1]
        start = time.perf_counter()
        for _ in range(steps):
            layers = [(k, v) for k, v, *_ in cache]
            out = model(input_ids=step_ids, past_key_values=DynamicCache(ddp_cache_data=layers, config=model.config),
                        use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
        return batch * steps / (time.perf_counter() - start)


def run(generator: str = "smollm2-135m", n_inputs: int = 24, batch_size: int = 128, greedy_items: int = 12,
        data_dir: str | None = None, device: str = "auto", seed: int = 42, json_out: Path | None = None) -> dict:
    from rich.console import Console
    from rich.table import Table

    from dsgen.artifacts import write_json
    from dsgen.data.inputs import load_inputs
    from dsgen.generation.decoding import DebiasedDecoder, DecodeRequest, SamplingConfig, reference_decode
    from dsgen.models import load_causal_lm
    from dsgen.taskspec import load_task_spec

    console = Console()
    lm = load_causal_lm(generator, device)
    spec = load_task_spec("sts-x2", with_inputs=True)
    inputs = load_inputs("stsb-train", n_inputs, data_dir)
    reqs = _requests(spec, inputs, 2)
    sampling = SamplingConfig()

    dec = DebiasedDecoder(lm.model, lm.tokenizer, sampling, max_rows=batch_size)
    start = time.perf_counter()
    core = dec.decode(reqs, seed=seed)
    core_stats = _stats(core, time.perf_counter() - start)
    core_stats["row_tokens_per_s"] = round(dec.stats["forward_rows"] / core_stats["seconds"], 1)

    start = time.perf_counter()
    ref = reference_decode(lm.model, lm.tokenizer, reqs, sampling, seed=seed)
    ref_stats = _stats(ref, time.perf_counter() - start)

    bare = roofline(lm.model, lm.tokenizer, batch_size, context=64)
    result: dict[str, Any] = {
        "generator": lm.describe(), "n_inputs": len(inputs), "items": len(reqs), "batch_size": batch_size,
        "core": core_stats, "reference": ref_stats,
        "speedup": round(core_stats["outputs_per_s"] / max(ref_stats["outputs_per_s"], 1e-9), 2),
        "roofline_row_tokens_per_s": round(bare, 1),
        "roofline_share": round(core_stats["row_tokens_per_s"] / bare, 3),
    }
    if greedy_items:
        greedy = SamplingConfig(top_k=1)
        items = [DecodeRequest(r.prompt, r.counter_prompts, 1, 1) for r in reqs[:greedy_items]]
        a = DebiasedDecoder(lm.model, lm.tokenizer, greedy, max_rows=batch_size).decode(items, seed=seed)
        b = reference_decode(lm.model, lm.tokenizer, items, greedy, seed=seed)
        same = sum(x[0].text == y[0].text for x, y in zip(a, b))
        result["greedy_agreement"] = round(same / len(items), 3)

    table = Table(title=f"generation speed, {generator}, {len(inputs)} inputs x 3 labels x 2 outputs")
    for col in ("loop", "outputs", "seconds", "outputs/s", "useful tokens/s"):
        table.add_column(col, justify="right")
    for name, s in (("reference (DINO-style)", ref_stats), (f"core (batch {batch_size})", core_stats)):
        table.add_row(name, str(s["outputs"]), str(s["seconds"]), str(s["outputs_per_s"]), str(s["useful_tokens_per_s"]))
    console.print(table)
    console.print(f"speed-up core / reference: [bold]{result['speedup']}x[/bold]; core forward throughput "
                  f"{core_stats['row_tokens_per_s']} row-tokens/s = {result['roofline_share']:.0%} of the bare model "
                  f"({result['roofline_row_tokens_per_s']} row-tokens/s at batch {batch_size})")
    if "greedy_agreement" in result:
        console.print(f"greedy (top-k 1) agreement core vs reference: {result['greedy_agreement']:.0%} of {greedy_items} items")
    if json_out:
        write_json(json_out, result)
    return result
