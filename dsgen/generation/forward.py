"""Batched forward passes of a causal LM over sequences of different lengths.

Sequences of different lengths share a batch only if each real token gets the position it would
have alone (0, 1, ... from its first real token) and attends to its own sequence only; without
that, a model with absolute position embeddings (GPT-2) scores a prompt differently depending on
what else is in the batch. Padding is done here, from token ids, so the tokenizer's own
``padding_side`` does not matter.

- :func:`forward_last`: whole sequences, left-padded, the logits after each one; the DINO-style
  reference loop and the zero-shot discriminator call it.
- :func:`extend_rows`: new tokens after each row's own cached past (a shared instruction prefix,
  or nothing), batch-invariant (:mod:`dsgen.generation.decode_step`); the decoder's prefill
  (:class:`dsgen.generation.batch.PromptBank`) calls it.
- :func:`buffer_cache`: a transformers cache over preallocated buffers, written in place; the
  decode loop's batch and :func:`extend_rows` use it.
- :func:`sliding_window`, :func:`check_fits_window`: what length of row the model can attend to,
  checked by both decode loops before they start.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsgen.errors import DsgenError
from dsgen.generation.decode_step import blocked_output_head, invariant_forward
from dsgen.generation.probed import Numerics


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text as the model expects a sequence to start (the tokenizer's special
    tokens, e.g. Gemma's BOS; none for GPT-2 or SmolLM2)."""
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=True)["input_ids"]]


def pad_id(tokenizer: Any) -> int:
    pid = tokenizer.pad_token_id
    if pid is None:
        pid = tokenizer.eos_token_id if isinstance(tokenizer.eos_token_id, int) else 0
    return int(pid)


def left_padded(ids: Sequence[Sequence[int]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """(input_ids, attention_mask, position_ids), each ``[B, max_len]``, padded on the left."""
    import torch

    width = max(len(s) for s in ids)
    input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, s in enumerate(ids):
        if s:
            input_ids[i, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return input_ids.to(device), mask.to(device), positions.to(device)


@dataclass
class Forward:
    """Result of :func:`forward_last`: next-token logits per row and, if asked, the cache."""

    logits: Any            # [B, V], float32
    lengths: list[int]     # real tokens per row
    width: int             # padded width
    keys: list[Any] | None = None    # per layer [B, H, width, D] (left-padded), when use_cache
    values: list[Any] | None = None


def forward_last(model: Any, ids: Sequence[Sequence[int]], pad: int, use_cache: bool = False) -> Forward:
    """Run token id sequences of any lengths as one left-padded batch; return the logits of each
    row's last real token (and the per-layer K/V when ``use_cache``)."""
    device = next(model.parameters()).device
    input_ids, mask, positions = left_padded(ids, pad, device)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=use_cache,
                logits_to_keep=1)
    result = Forward(out.logits[:, -1].float(), [len(s) for s in ids], int(mask.shape[1]))
    if use_cache:
        layers = cache_layers(returned_cache(out))
        result.keys = [k for k, _ in layers]
        result.values = [v for _, v in layers]
    return result


def buffer_cache(keys: list[Any], values: list[Any], rows: int, width: int) -> Any:
    """A transformers cache over per-layer buffers ``[>= rows, H, columns, D]``: the first ``width``
    columns of the first ``rows`` rows are the past; a forward pass writes its new columns after them,
    in place, and attends to ``[0, width + new)``."""
    from transformers.cache_utils import Cache, DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, kbuf: Any, vbuf: Any) -> None:
            super().__init__()
            self.kbuf, self.vbuf, self.width = kbuf, vbuf, width
            self.dtype, self.device = kbuf.dtype, kbuf.device
            self.keys, self.values = kbuf[:rows, :, :width], vbuf[:rows, :, :width]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            w, n = self.width, key_states.shape[2]
            self.kbuf[:rows, :, w:w + n] = key_states
            self.vbuf[:rows, :, w:w + n] = value_states
            self.width = w + n
            self.keys, self.values = self.kbuf[:rows, :, :w + n], self.vbuf[:rows, :, :w + n]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.width

        def get_mask_sizes(self, query_length: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.width + query_length, 0

    return Cache(layers=[BufferLayer(k, v) for k, v in zip(keys, values)])


@dataclass
class Extension:
    """Result of :func:`extend_rows`."""

    logits: Any          # [B, V] float32: next-token logits after each row's last new token
    keys: list[Any]      # per layer [B, H, width, D]: the new tokens' keys, row r's in columns [0, lengths[r])
    values: list[Any]
    lengths: list[int]   # new tokens per row


def extend_rows(model: Any, new: Sequence[Sequence[int]], pad: int, past_keys: list[Any] | None = None,
                past_values: list[Any] | None = None, past_lengths: Sequence[int] | None = None, *,
                numerics: Numerics) -> Extension:
    """Feed each row its new tokens after its own past, in one batch; every row gets the bits it
    would get alone.

    Args:
        new: the new token ids of each row (at least one each).
        pad: the id fed at padding positions.
        past_keys / past_values: per layer ``[B, H, P, D]``, row r's past right-aligned in its last
            ``past_lengths[r]`` columns (None: no past).
        numerics: what this machine's probe chose for ``model``
            (:func:`dsgen.generation.invariance.numerics`).
    Layout (why it is batch-invariant): row r's keys are ``[padding][past][new][padding]``, its real
    columns contiguous, so that padding only ever comes before or after them (an attention score or
    sum then has the same bits as without it; a gap would not); the new tokens are padded on the
    right and the output head reads each row's last real position; rows are added (a padding
    sequence) until the row count is batch-invariant, and attention uses the softmax that is
    batch-invariant on this machine (both as probed: ``numerics``).
    """
    import torch

    device = next(model.parameters()).device
    n = len(new)
    past_lengths = list(past_lengths) if past_lengths is not None else [0] * n
    lengths = [len(s) for s in new]
    rows = numerics.rows(n)
    lengths_all = lengths + [1] * (rows - n)
    past_all = past_lengths + [0] * (rows - n)
    wp = int(past_keys[0].shape[2]) if past_keys is not None else 0
    s_max = max(lengths)
    ids = torch.full((rows, s_max), pad, dtype=torch.long)
    for r, seq in enumerate(new):
        ids[r, :len(seq)] = torch.tensor(list(seq), dtype=torch.long)
    t = torch.arange(s_max)
    positions = torch.tensor(past_all)[:, None] + t[None, :]
    # query t of row r attends to its past and to its new tokens up to t (a padding query to its row)
    cols = torch.arange(wp + s_max)[None, None, :]
    first = (wp - torch.tensor(past_all))[:, None, None]
    mask = (cols >= first) & (cols <= wp + t[None, :, None])
    last = torch.tensor([length - 1 for length in lengths_all], device=device)

    def gather_last(module: Any, args: tuple) -> tuple:
        hidden = args[0]
        return (hidden[torch.arange(hidden.shape[0], device=hidden.device), last][:, None, :],)

    if past_keys is None:
        from transformers import DynamicCache

        cache = DynamicCache()  # plain layers: a sliding-window layer would drop columns
    else:
        kbufs, vbufs = [], []
        for k, v in zip(past_keys, past_values):
            kb = k.new_zeros((rows, k.shape[1], wp + s_max, k.shape[3]))
            vb = v.new_zeros((rows, v.shape[1], wp + s_max, v.shape[3]))
            kb[:n, :, :wp] = k
            vb[:n, :, :wp] = v
            kbufs.append(kb)
            vbufs.append(vb)
        cache = buffer_cache(kbufs, vbufs, rows, wp)
    head = model.get_output_embeddings()
    hook = head.register_forward_pre_hook(gather_last)
    try:
        with invariant_forward(model, numerics.attention), blocked_output_head(model):
            out = model(input_ids=ids.to(device), attention_mask=mask[:, None].to(device),
                        position_ids=positions.to(device), **cache_arg(model, cache), use_cache=True, logits_to_keep=0)
    finally:
        hook.remove()
    layers = cache_layers(returned_cache(out))
    return Extension(out.logits[:n, -1].float(), [k[:n, :, wp:] for k, _ in layers], [v[:n, :, wp:] for _, v in layers],
                     lengths)


@functools.lru_cache(maxsize=None)
def _takes_cache(model_class: type) -> bool:
    return "cache" in inspect.signature(model_class.forward).parameters


def cache_arg(model: Any, cache: Any) -> dict[str, Any]:
    """The keyword that hands a KV cache to ``model``'s forward: ``cache`` from transformers 5.24 on (which
    deprecates ``past_key_values`` with a warning per call), ``past_key_values`` before."""
    return {"cache": cache} if _takes_cache(type(model)) else {"past_key_values": cache}


def returned_cache(out: Any) -> Any:
    """The KV cache a forward returned, under either name (see ``cache_arg``)."""
    return out["cache"] if "cache" in out else out.past_key_values


def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache object."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def sliding_window(model: Any) -> int | None:
    """The attention window of a model with sliding-window layers (Gemma 2/3, Mistral...), else None."""
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    if not window:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    return int(window)


def check_fits_window(model: Any, longest_prompt: int, max_new_tokens: int) -> None:
    """A row must fit what the model can attend to: a sliding-window model's window (it attends to all of a row only
    inside it) and a model's learned absolute positions (GPT-2's ``n_positions``: a longer row has no embedding and
    would crash inside the forward); refuse otherwise, in one line."""
    limits = [(sliding_window(model), "sliding attention window")]
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    limits.append((getattr(cfg, "n_positions", None), "learned positions"))
    for limit, what in limits:
        if limit and longest_prompt + max_new_tokens > limit - 1:
            raise DsgenError(f"a prompt of {longest_prompt} tokens plus {max_new_tokens} new tokens does not fit the "
                             f"model's {what} ({limit}); use shorter prompts or --max-new-tokens "
                             f"{max(1, limit - 1 - longest_prompt)}")
