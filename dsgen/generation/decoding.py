"""The self-debiasing decode loop over a causal LM with a KV cache.

Written by hand because no library offers it: Hugging Face ``generate`` samples every row
on its own, while self-debiasing (Schick et al., 2021; DINO, Schick & Schütze, 2021) needs
each counter-instruction row to be continued with the token sampled for its main row.

A *group* is one sample: one main row (the instruction of label y) plus one row per
counter label y' in CL(y), all fed the same tokens. At every step

    p   = softmax over the main row
    p_c = max over the counter rows of their softmax
    p'  = p * max(exp(-lambda * max(p_c - p, 0)), eps), renormalised

then top-k and top-p filter p' and one token is drawn. A group ends at the first quotation
mark in its decoded text or after ``max_new_tokens``. Many groups are decoded together;
finished groups leave the batch (their KV-cache rows are dropped) and queued groups take
their place, so compute goes to unfinished rows. Prompts are prefilled once per distinct
text and their cache is copied into every row that needs it (the counter prompt of a
label is the main prompt of another label for the same input).
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsgen.config import Config

QUOTE = '"'


@dataclass
class SamplingConfig(Config):
    """Decoding settings; defaults are DINO's (Schick & Schütze, 2021, Sec. 4).

    Args:
        decay_constant: lambda of self-debiasing; 0 turns it off.
        epsilon: lower bound of the debiasing factor.
        top_k: keep the k most likely tokens (0: off).
        top_p: nucleus sampling mass (1.0: off).
        max_new_tokens: a row that has not closed its quote after this many tokens ends unclosed.
        suppress_eos: never sample the end-of-sequence token (DINO sets min_length = max_length).
        stop_at_newline: end a group early at a newline that precedes any quote; such an output
            is discarded anyway unless newlines are allowed, so this saves compute only.
    """

    decay_constant: float = 100.0
    epsilon: float = 0.01
    top_k: int = 5
    top_p: float = 0.9
    max_new_tokens: int = 40
    suppress_eos: bool = True
    stop_at_newline: bool = True


@dataclass(frozen=True)
class DecodeRequest:
    """Ask for ``n`` accepted continuations of ``prompt`` debiased against ``counter_prompts``.

    Up to ``max_attempts`` tries are made; each try samples the continuations still missing.
    """

    prompt: str
    counter_prompts: tuple[str, ...] = ()
    n: int = 1
    max_attempts: int = 5


@dataclass
class DecodeOutput:
    """One sampled continuation.

    ``text`` is the decoded text before the first quotation mark (None when no quote was
    produced); ``accepted`` says whether it passes the output rules (closed, non-empty, no
    newline unless allowed).
    """

    text: str | None
    raw: str
    n_tokens: int
    attempt: int
    accepted: bool


def self_debias(p_main: Any, p_counter: Any, decay_constant: float, epsilon: float) -> Any:
    """Self-debiasing of next-token distributions (Schick et al., 2021, eq. for alpha).

    Args:
        p_main: ``[G, V]`` probabilities under the main instruction.
        p_counter: ``[G, V]`` maximum probability over the counter instructions (zeros where
            a group has none).
    Returns:
        ``[G, V]`` renormalised, debiased probabilities.
    """
    import torch

    delta = (p_counter - p_main).clamp_min(0.0)
    factor = torch.exp(-decay_constant * delta).clamp_min(epsilon)
    p = p_main * factor
    return p / p.sum(dim=-1, keepdim=True)


class TokenSampler:
    """Turns the logits of all rows into one token per group (debias, top-k, top-p, draw).

    Shared by the fast loop and the reference loop so that they differ only in scheduling.
    """

    def __init__(self, sampling: SamplingConfig, eos_ids: Sequence[int], generator: Any) -> None:
        from transformers import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

        self.cfg = sampling
        self.eos_ids = list(eos_ids) if sampling.suppress_eos else []
        warpers = []
        if sampling.top_k and sampling.top_k > 0:
            warpers.append(TopKLogitsWarper(top_k=sampling.top_k))
        if sampling.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=sampling.top_p))
        self.warpers = LogitsProcessorList(warpers)
        self.generator = generator

    def distribution(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any) -> Any:
        """Debiased, filtered next-token probabilities ``[G, V]`` for the groups."""
        import torch

        logits = logits.float()
        if self.eos_ids:
            logits = logits.index_fill(1, torch.tensor(self.eos_ids, device=logits.device), -math.inf)
        probs = torch.softmax(logits, dim=-1)
        p_main = probs.index_select(0, main_rows)
        if counter_rows.numel() and self.cfg.decay_constant != 0:
            p_counter = torch.zeros_like(p_main)
            with warnings.catch_warnings():  # index_reduce_ is flagged "beta" by torch; it is the right op here
                warnings.simplefilter("ignore", UserWarning)
                p_counter.index_reduce_(0, counter_group, probs.index_select(0, counter_rows), "amax")
            p_main = self_debias(p_main, p_counter, self.cfg.decay_constant, self.cfg.epsilon)
        scores = self.warpers(None, torch.log(p_main))
        return torch.softmax(scores, dim=-1)

    def sample(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any) -> Any:
        import torch

        probs = self.distribution(logits, main_rows, counter_rows, counter_group)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(1)


class OutputRules:
    """Where a continuation ends and whether it is kept (DINO's ``_process_output``)."""

    def __init__(self, tokenizer: Any, allow_newlines: bool = False, keep_unclosed: bool = False) -> None:
        import torch

        self.tokenizer = tokenizer
        self.allow_newlines = allow_newlines
        self.keep_unclosed = keep_unclosed
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        # A token "may end the text" when its own text holds a quote or a newline; only then
        # is the whole sequence decoded again (a token such as '."' carries text before the quote).
        self.quote_tokens = torch.tensor([QUOTE in p for p in pieces], dtype=torch.bool)
        self.newline_tokens = torch.tensor(["\n" in p for p in pieces], dtype=torch.bool)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def judge(self, raw: str) -> tuple[str | None, bool]:
        """Return (text before the first quote or None, accepted)."""
        if QUOTE in raw:
            text: str | None = raw.split(QUOTE, 1)[0]
        else:
            text = raw if self.keep_unclosed else None
        ok = bool(text) and (self.allow_newlines or "\n" not in text)  # type: ignore[operator]
        return text, ok


@dataclass
class _Item:
    request: DecodeRequest
    index: int
    outputs: list[DecodeOutput] = field(default_factory=list)
    accepted: int = 0
    attempt: int = 0
    outstanding: int = 0


@dataclass
class _Group:
    item: _Item
    prompts: tuple[str, ...]  # main prompt first
    attempt: int
    tokens: list[int] = field(default_factory=list)


class DebiasedDecoder:
    """Batched self-debiasing decoding with group compaction and admission.

    Args:
        model: a causal LM (``transformers`` ``AutoModelForCausalLM``), already on its device.
        tokenizer: its tokenizer.
        sampling: :class:`SamplingConfig`.
        max_rows: most sequences (main + counter rows) decoded at once.
        allow_newlines / keep_unclosed: output rules, see :class:`OutputRules`.

    Example:
        >>> dec = DebiasedDecoder(lm.model, lm.tokenizer, SamplingConfig())   # doctest: +SKIP
        >>> outs = dec.decode([DecodeRequest('Sentence 2: "', n=2)], seed=1)  # doctest: +SKIP
    """

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig | None = None,
                 max_rows: int = 128, allow_newlines: bool = False, keep_unclosed: bool = False,
                 prefill_batch: int = 32) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_rows = max_rows
        self.prefill_batch = prefill_batch
        self.rules = OutputRules(tokenizer, allow_newlines, keep_unclosed)
        eos = tokenizer.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        self.device = next(model.parameters()).device
        self.stats = {"forward_rows": 0, "steps": 0}

    # -- model calls ------------------------------------------------------------------
    def _cache(self, keys: list[Any], values: list[Any]) -> Any:
        from transformers import DynamicCache

        return DynamicCache(ddp_cache_data=list(zip(keys, values)), config=self.model.config)

    def prefill(self, prompts: Sequence[str]) -> dict[str, tuple[list[Any], list[Any], Any]]:
        """Run each distinct prompt once: prompt -> (keys per layer, values per layer, last logits)."""
        import torch

        bank: dict[str, tuple[list[Any], list[Any], Any]] = {}
        ordered = sorted(set(prompts), key=lambda p: len(p))
        for start in range(0, len(ordered), self.prefill_batch):
            chunk = ordered[start:start + self.prefill_batch]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            mask = enc["attention_mask"]
            pos = (mask.cumsum(-1) - 1).clamp_min(0)
            out = self.model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=pos,
                             use_cache=True, logits_to_keep=1)
            self.stats["forward_rows"] += int(mask.sum())
            layers = [(k, v) for k, v, *_ in out.past_key_values]
            lengths = mask.sum(-1).tolist()
            width = mask.shape[1]
            for i, prompt in enumerate(chunk):
                lo = width - int(lengths[i])
                bank[prompt] = ([k[i, :, lo:].clone() for k, _ in layers],
                                [v[i, :, lo:].clone() for _, v in layers],
                                out.logits[i, -1].clone())
            del out
        return bank

    # -- the loop -------------------------------------------------------------------
    def decode(self, requests: Sequence[DecodeRequest], seed: int = 0,
               on_group_done: Callable[[DecodeOutput], None] | None = None) -> list[list[DecodeOutput]]:
        """Decode every request; returns, per request, all sampled outputs in attempt order."""
        import torch

        with torch.inference_mode():
            return self._decode(requests, seed, on_group_done)

    def _decode(self, requests: Sequence[DecodeRequest], seed: int,
                on_group_done: Callable[[DecodeOutput], None] | None) -> list[list[DecodeOutput]]:
        import torch
        import torch.nn.functional as F

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        sampler = TokenSampler(self.sampling, self.eos_ids, gen)
        rules = self.rules
        quote_tok = rules.quote_tokens.to(self.device)
        stop_tok = (quote_tok | rules.newline_tokens.to(self.device)) if self.sampling.stop_at_newline else quote_tok

        items = [_Item(r, i) for i, r in enumerate(requests)]
        bank = self.prefill([p for r in requests for p in (r.prompt, *r.counter_prompts)])
        queue: deque[_Group] = deque()

        def enqueue_round(item: _Item) -> None:
            missing = item.request.n - item.accepted
            if missing <= 0 or item.attempt >= item.request.max_attempts:
                return
            item.attempt += 1
            item.outstanding += missing
            prompts = (item.request.prompt, *item.request.counter_prompts)
            queue.extend(_Group(item, prompts, item.attempt) for _ in range(missing))

        for item in items:
            enqueue_round(item)

        groups: list[_Group] = []
        keys: list[Any] = []
        values: list[Any] = []
        mask = pos = logits = None
        n_layers = len(next(iter(bank.values()))[0]) if bank else 0

        while queue or groups:
            # 1. admit queued groups while rows are free (always at least one group)
            rows_used = sum(len(g.prompts) for g in groups)
            admitted: list[_Group] = []
            while queue and (rows_used + len(queue[0].prompts) <= self.max_rows or not (groups or admitted)):
                g = queue.popleft()
                admitted.append(g)
                rows_used += len(g.prompts)
            if admitted:
                new_prompts = [p for g in admitted for p in g.prompts]
                new_len = max(bank[p][0][0].shape[1] for p in new_prompts)
                width = max(new_len, mask.shape[1] if mask is not None else 0)

                def pad_left(t: Any, total: int) -> Any:
                    return F.pad(t, (0, 0, total - t.shape[-2], 0))

                new_keys = [torch.stack([pad_left(bank[p][0][layer], width) for p in new_prompts])
                            for layer in range(n_layers)]
                new_values = [torch.stack([pad_left(bank[p][1][layer], width) for p in new_prompts])
                              for layer in range(n_layers)]
                lens = torch.tensor([bank[p][0][0].shape[1] for p in new_prompts], device=self.device)
                new_mask = (torch.arange(width, device=self.device)[None, :] >= (width - lens)[:, None]).long()
                new_logits = torch.stack([bank[p][2] for p in new_prompts])
                if mask is None or not groups:
                    keys, values, mask, pos, logits = new_keys, new_values, new_mask, lens.clone(), new_logits
                else:
                    old = mask.shape[1]
                    keys = [torch.cat([F.pad(k, (0, 0, width - old, 0)), nk]) for k, nk in zip(keys, new_keys)]
                    values = [torch.cat([F.pad(v, (0, 0, width - old, 0)), nv]) for v, nv in zip(values, new_values)]
                    mask = torch.cat([F.pad(mask, (width - old, 0)), new_mask])
                    pos = torch.cat([pos, lens])
                    logits = torch.cat([logits, new_logits])
                groups.extend(admitted)

            # 2. one sampling step for every active group
            sizes = torch.tensor([len(g.prompts) for g in groups], device=self.device)
            starts = sizes.cumsum(0) - sizes
            group_of_row = torch.repeat_interleave(torch.arange(len(groups), device=self.device), sizes)
            is_counter = torch.ones(int(sizes.sum()), dtype=torch.bool, device=self.device)
            is_counter[starts] = False
            counter_rows = is_counter.nonzero().squeeze(1)
            next_tok = sampler.sample(logits, starts, counter_rows, group_of_row.index_select(0, counter_rows))
            self.stats["steps"] += 1

            # 3. which groups are done
            next_list = next_tok.tolist()
            maybe_done = stop_tok.index_select(0, next_tok).tolist()
            keep: list[int] = []
            for gi, g in enumerate(groups):
                g.tokens.append(next_list[gi])
                at_limit = len(g.tokens) >= self.sampling.max_new_tokens
                if not (at_limit or maybe_done[gi]):
                    keep.append(gi)
                    continue
                raw = rules.decode(g.tokens)  # decoded once, only when the group may have ended
                if not at_limit and not (QUOTE in raw or (self.sampling.stop_at_newline and "\n" in raw)):
                    keep.append(gi)
                    continue
                text, ok = rules.judge(raw)
                out = DecodeOutput(text, raw, len(g.tokens), g.attempt, ok)
                it = g.item
                it.outputs.append(out)
                it.accepted += int(ok)
                it.outstanding -= 1
                if on_group_done is not None:
                    on_group_done(out)
                if it.outstanding == 0:
                    enqueue_round(it)
            if len(keep) < len(groups):
                keep_rows = torch.cat([torch.arange(int(starts[gi]), int(starts[gi] + sizes[gi]), device=self.device)
                                       for gi in keep]) if keep else torch.zeros(0, dtype=torch.long, device=self.device)
                groups = [groups[gi] for gi in keep]
                next_tok = next_tok.index_select(0, torch.tensor(keep, dtype=torch.long, device=self.device))
                sizes = sizes.index_select(0, torch.tensor(keep, dtype=torch.long, device=self.device))
                keys = [k.index_select(0, keep_rows) for k in keys]
                values = [v.index_select(0, keep_rows) for v in values]
                mask, pos = mask.index_select(0, keep_rows), pos.index_select(0, keep_rows)
                if groups:
                    # drop leading columns that no remaining row attends to
                    first = int(mask.any(0).long().argmax())
                    if first:
                        keys = [k[:, :, first:] for k in keys]
                        values = [v[:, :, first:] for v in values]
                        mask = mask[:, first:]
            if not groups:
                mask = None
                continue

            # 4. feed the sampled token to every row of its group
            row_tok = torch.repeat_interleave(next_tok, sizes)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=row_tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                             past_key_values=self._cache(keys, values), use_cache=True, logits_to_keep=1)
            self.stats["forward_rows"] += int(row_tok.shape[0])
            logits = out.logits[:, -1]
            kv = [(k, v) for k, v, *_ in out.past_key_values]
            keys, values = [k for k, _ in kv], [v for _, v in kv]
            pos = pos + 1
            del out
        return [it.outputs for it in items]


def reference_decode(model: Any, tokenizer: Any, requests: Sequence[DecodeRequest],
                     sampling: SamplingConfig | None = None, seed: int = 0, allow_newlines: bool = False,
                     keep_unclosed: bool = False) -> list[list[DecodeOutput]]:
    """DINO's original schedule, kept as the baseline for benchmarks and equivalence tests.

    One request at a time: its ``n`` samples and their counter rows decoded together for
    exactly ``max_new_tokens`` steps (DINO sets min_length = max_length), cut at the quote
    afterwards; a further try for the outputs still missing, up to ``max_attempts``.
    """
    import torch

    sampling = sampling or SamplingConfig()
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    eos = tokenizer.eos_token_id
    sampler = TokenSampler(sampling, [eos] if isinstance(eos, int) else list(eos or []), gen)
    rules = OutputRules(tokenizer, allow_newlines, keep_unclosed)
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
                enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(dev)
                mask = enc["attention_mask"]
                pos = (mask.cumsum(-1) - 1).clamp_min(0)
                out = model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=pos, use_cache=True,
                            logits_to_keep=1)
                main_rows = torch.arange(n, device=dev)
                counter_rows = torch.arange(n, len(prompts), device=dev)
                counter_group = counter_rows % n
                pos = pos[:, -1] + 1
                tokens = []
                for step in range(sampling.max_new_tokens):
                    tok = sampler.sample(out.logits[:, -1], main_rows, counter_rows, counter_group)
                    tokens.append(tok)
                    if step == sampling.max_new_tokens - 1:
                        break
                    row_tok = tok.repeat(len(prompts) // n)
                    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                    out = model(input_ids=row_tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                                past_key_values=out.past_key_values, use_cache=True, logits_to_keep=1)
                    pos = pos + 1
                seqs = torch.stack(tokens, dim=1).tolist()
                for seq in seqs:
                    raw = rules.decode(seq)
                    text, ok = rules.judge(raw)
                    # tokens up to the one that closed the quote, as the core counts them
                    used = next((i + 1 for i in range(len(seq)) if QUOTE in rules.decode(seq[:i + 1])), len(seq))
                    outs.append(DecodeOutput(text, raw, used, attempt, ok))
                    accepted += int(ok)
            results.append(outs)
    return results
