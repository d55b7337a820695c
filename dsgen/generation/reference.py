"""DINO's original decode schedule, kept as the baseline for benchmarks and equivalence tests.

:func:`reference_decode` decodes one request at a time for exactly ``max_new_tokens`` steps with a
plain transformers cache, sampling with the fast loop's :class:`~dsgen.generation.sampling.TokenSampler`
and judging with its :class:`~dsgen.generation.outputs.OutputRules`; :func:`same_output` is the one
comparison of a core output (:class:`~dsgen.generation.decoding.DebiasedDecoder`) with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsgen.generation.forward import cache_arg, check_fits_window, forward_last, pad_id, returned_cache, tokenize
from dsgen.generation.outputs import DecodeOutput, DecodeRequest, OutputRules
from dsgen.generation.sampling import SamplingConfig, TokenSampler


def reference_decode(model: Any, tokenizer: Any, requests: Sequence[DecodeRequest],
                     sampling: SamplingConfig | None = None, seed: int = 0, rules: OutputRules | None = None,
                     end_ids: Sequence[int] | None = None) -> list[list[DecodeOutput]]:
    """DINO's original schedule, kept as the baseline for benchmarks and equivalence tests.

    One request at a time: its ``n`` samples and their counter rows decoded together for
    exactly ``max_new_tokens`` steps (DINO sets min_length = max_length), each output cut at
    its first stop (closing quote, or an end-of-text token when those are not suppressed)
    afterwards; a further try for the outputs still missing, up to ``max_attempts``.
    """
    import torch

    sampling = sampling or SamplingConfig()
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    if end_ids is None:
        from dsgen.models import end_of_text_ids

        end_ids = end_of_text_ids(model, tokenizer)
    vocab = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None else None
    rules = rules or OutputRules(tokenizer, vocab, end_ids=end_ids)
    sampler = TokenSampler(sampling, rules.blocked(sampling.suppress_eos), gen)
    pad = pad_id(tokenizer)
    results: list[list[DecodeOutput]] = []
    with torch.inference_mode():
        for req in requests:
            outs: list[DecodeOutput] = []
            accepted = 0
            for attempt in range(1, req.max_attempts + 1):
                n = req.n - accepted
                if n <= 0:
                    break
                # rows: n main rows, then n rows per counter prompt (DINO's layout)
                prompts = [req.prompt] * n + [c for c in req.counter_prompts for _ in range(n)]
                ids = tokenize(tokenizer, prompts)
                check_fits_window(model, max(len(i) for i in ids), sampling.max_new_tokens)
                first = forward_last(model, ids, pad, use_cache=True)
                from transformers import DynamicCache

                cache = DynamicCache(ddp_cache_data=list(zip(first.keys, first.values)), config=model.config)
                logits = first.logits
                mask = torch.ones((len(prompts), first.width), dtype=torch.long, device=dev)
                for i, length in enumerate(first.lengths):
                    mask[i, :first.width - length] = 0
                pos = torch.tensor(first.lengths, device=dev)
                main_rows = torch.arange(n, device=dev)
                counter_rows = torch.arange(n, len(prompts), device=dev)
                counter_group = counter_rows % n
                steps: list[Any] = []
                step_logprobs: list[Any] = []
                for step in range(sampling.max_new_tokens):
                    tok, lp = sampler.sample(logits, main_rows, counter_rows, counter_group)
                    steps.append(tok)
                    step_logprobs.append(lp)
                    if step == sampling.max_new_tokens - 1:
                        break
                    row_tok = tok.repeat(len(prompts) // n)
                    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                    out = model(input_ids=row_tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                                **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
                    cache, logits, pos = returned_cache(out), out.logits[:, -1].float(), pos + 1
                seqs = torch.stack(steps, dim=1).tolist()
                lps = torch.stack(step_logprobs, dim=1).tolist()
                for seq, lp in zip(seqs, lps):
                    used = _first_stop(seq, rules, sampling)
                    raw = rules.decode(seq[:used])
                    text, reason = rules.judge(raw)
                    ok = reason is None
                    outs.append(DecodeOutput(text, raw, seq[:used], attempt, ok, lp[:used], reason))
                    accepted += int(ok)
            results.append(outs)
    return results


def same_output(core: DecodeOutput, reference: DecodeOutput) -> bool:
    """Whether the core and :func:`reference_decode` gave the same output (the one comparison that the
    equivalence tests, CPU and GPU, and ``dsgen bench generation`` use): the same kept text (or both
    rejected) and the same tokens. The core stops an output as soon as it is decided, the reference
    only at a closing quote (DINO decodes all 40 tokens), so an output the core ended at a newline (text
    None) is longer there, with the newline in its text: the core's tokens are its start."""
    return (core.accepted == reference.accepted and (core.text == reference.text or not core.accepted)
            and reference.tokens[:len(core.tokens)] == core.tokens
            and (core.tokens == reference.tokens or not core.accepted))


def _first_stop(seq: Sequence[int], rules: OutputRules, sampling: SamplingConfig) -> int:
    """Tokens up to and including the one that ends the output (as the core stops), else all."""
    for i, t in enumerate(seq):
        if not sampling.suppress_eos and bool(rules.end_tokens[t]):
            return i + 1
        if bool(rules.quote_tokens[t]) and rules.close_quote in rules.decode(seq[:i + 1]):
            return i + 1
    return len(seq)


__all__ = ["reference_decode", "same_output"]
