"""Batched forward passes of a causal LM over sequences of different lengths.

Sequences of different lengths share a batch only if each real token gets the position it would
have alone (0, 1, ... from its first real token) and attends to its own sequence only; without
that, a model with absolute position embeddings (GPT-2) scores a prompt differently depending on
what else is in the batch. Padding is done here, from token ids, so the tokenizer's own
``padding_side`` does not matter.

- :func:`forward_last`: whole sequences, left-padded, the logits after each one, through the model's
  own attention (a row's bits depend on its batch's padding and row count); the DINO-style reference
  loop calls it.
- :func:`extend_rows`: new tokens after each row's own cached past (a shared instruction prefix,
  or nothing), packed, each row's bits its own by construction (:mod:`dsgen.generation.prefill_step`);
  the decoder's prefill (:class:`dsgen.generation.batch.PromptBank`) and the judges
  (:mod:`dsgen.generation.judge`) call it.
- :func:`buffer_cache`: a transformers cache over preallocated buffers, written in place; the
  decode loop's batch uses it.
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
from dsgen.generation.kernels import Kernels, model_kernels
from dsgen.generation.prefill_step import Packing, packed_prefill, prefill_rows
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
    rows: int            # rows each linear layer but the head multiplied (the tokens, the zero rows padding blocks)


def extend_rows(model: Any, new: Sequence[Sequence[int]], pad: int, past_keys: list[Any] | None = None,
                past_values: list[Any] | None = None, past_lengths: Sequence[int] | None = None, *,
                numerics: Numerics | None = None, attention: str | None = None, keep_cache: bool = True) -> Extension:
    """Feed each row its new tokens after its own past, in one forward pass; every row gets the bits it
    would get alone, by construction (:mod:`dsgen.generation.prefill_step`).

    Args:
        new: the new token ids of each row (at least one each).
        pad: unused (no row is padded with tokens; kept for the callers' signature).
        past_keys / past_values: per layer ``[B, H, P, D]``, row r's past right-aligned in its last
            ``past_lengths[r]`` columns (None: no past).
        numerics: what this machine's probe chose for ``model``
            (:func:`dsgen.generation.invariance.numerics`): its softmax (``attention`` overrides it;
            without either, PyTorch's) and its batch-invariant row counts, which let the last row block be
            cut to the tokens' need (:func:`~dsgen.generation.prefill_step.fixed_blocks`). Without it (a
            judge), a CPU model's counts are measured here (:func:`~dsgen.generation.kernels.model_kernels`,
            once per process, model shapes and thread count); where none gives a row the same bits wherever it
            sits in a block, the rows run one per pass.
        keep_cache: return the new tokens' keys and values (False: logits only, as a judge needs).
    Layout: the rows' new tokens are packed into one sequence, each at its own position (its past's
    length on); attention runs prompt by prompt over the prompt's own keys and every linear layer in
    fixed row blocks; the output head reads each row's last token.
    """
    import torch

    device = next(model.parameters()).device
    n = len(new)
    past = [int(p) for p in past_lengths] if past_lengths is not None else [0] * n
    kernels = (numerics.kernels if numerics is not None else model_kernels(model) if device.type == "cpu"
               else Kernels(()))
    counts = kernels.counts
    if device.type == "cpu" and not counts and n > 1:
        return _row_by_row(model, new, pad, past_keys, past_values, past, numerics=numerics, attention=attention,
                           keep_cache=keep_cache)
    lengths = [len(s) for s in new]
    starts = [0]
    for length in lengths[:-1]:
        starts.append(starts[-1] + length)
    ids = torch.tensor([t for s in new for t in s], dtype=torch.long, device=device)[None]
    positions = torch.tensor([p + t for p, length in zip(past, lengths) for t in range(length)], dtype=torch.long,
                             device=device)[None]
    last = torch.tensor([s + length - 1 for s, length in zip(starts, lengths)], device=device)

    def gather_last(module: Any, args: tuple) -> tuple:
        return (args[0][0, last][:, None, :],)

    from transformers import DynamicCache

    cache = DynamicCache()  # plain layers: a sliding-window layer would drop columns
    packing = Packing(tuple(starts), tuple(lengths), tuple(past), past_keys if any(past) else None,
                      past_values if any(past) else None)
    attention = attention or (numerics.attention if numerics is not None else "softmax")
    hook = model.get_output_embeddings().register_forward_pre_hook(gather_last)
    try:
        # no graph: the blocked layers write in place
        with torch.no_grad(), packed_prefill(model, packing, attention, kernels):
            out = model(input_ids=ids, position_ids=positions, **cache_arg(model, cache), use_cache=True,
                        logits_to_keep=0)
    finally:
        hook.remove()
    logits = out.logits[:, -1].float()
    rows_multiplied = sum(prefill_rows(sum(lengths), counts))
    if not keep_cache:
        return Extension(logits, [], [], lengths, rows_multiplied)
    width = max(lengths)
    rows = torch.tensor([r for r, length in enumerate(lengths) for _ in range(length)], device=device)
    cols = torch.tensor([t for length in lengths for t in range(length)], device=device)
    keys, values = [], []
    for k, v in cache_layers(returned_cache(out)):
        for packed, into in ((k, keys), (v, values)):
            unpacked = packed.new_zeros((n, width, packed.shape[1], packed.shape[3]))
            unpacked[rows, cols] = packed[0].transpose(0, 1)
            into.append(unpacked.transpose(1, 2))
    return Extension(logits, keys, values, lengths, rows_multiplied)


def _row_by_row(model: Any, new: Sequence[Sequence[int]], pad: int, past_keys: list[Any] | None,
                past_values: list[Any] | None, past: list[int], **options: Any) -> Extension:
    """:func:`extend_rows` one row per forward pass, the rows' results put together as one pass returns them:
    where no row count gives a row the same bits wherever it sits in a block (the probe found none), a row alone
    has its tokens at positions that depend on the row alone."""
    import torch

    parts = [extend_rows(model, [tokens], pad, None if past_keys is None else [k[r:r + 1] for k in past_keys],
                         None if past_values is None else [v[r:r + 1] for v in past_values], [past[r]], **options)
             for r, tokens in enumerate(new)]
    width = max(len(tokens) for tokens in new)

    def stacked(tensors: list[Any]) -> Any:  # [1, H, w, D] each -> [B, H, width, D], zeros beyond a row's own
        return torch.cat([torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[2])) for t in tensors])

    layers = range(len(parts[0].keys))
    return Extension(torch.cat([p.logits for p in parts]),
                     [stacked([p.keys[i] for p in parts]) for i in layers],
                     [stacked([p.values[i] for p in parts]) for i in layers],
                     [len(tokens) for tokens in new], sum(p.rows for p in parts))


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
