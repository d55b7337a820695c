"""The exact prefill: a prompt's keys, values and next-token logits are the same bits whatever it is
batched with, and whether its first tokens were fed before it (a cached shared prefix) or with it.

The decoder's prompt bank (:class:`~dsgen.generation.batch.PromptBank`) and the LM judge
(:mod:`~dsgen.generation.judge`) feed many prompts of different lengths in one forward pass; neither may
let a prompt's bits depend on the others. Earlier releases made the batch's shapes batch-invariant on the
CPU they ran on (rows padded to a probed count, keys to a probed width); where a CPU's kernels change their
rounding with the row count (an Intel Xeon with AVX-512: MKL gives a row the same bits only at 16-56 rows
and a few large counts), no padding of a ``[prompts, tokens]`` batch is invariant, and the decoder gave up
sharing. Here the shapes a prompt's bits depend on are fixed, or a function of that prompt alone:

- **Packed tokens, row blocks of one probed size**: the prompts' new tokens are packed into one sequence (no
  padding between them; each token keeps its own position). Every linear layer multiplies them in blocks of
  ``PREFILL_ROWS`` (256) rows, zero rows padding the last block, and the output head the prompts' last tokens in
  blocks of ``HEAD_ROWS`` (32) (:func:`~dsgen.generation.decode_step.blocked_linears`). A matrix multiply of one
  shape gives a row bits that depend on the other rows' values nowhere, but it may on where the row sits in the
  block: MKL on an Intel CPU's AVX2 path multiplies small matrices six rows at a time and gives a tail of one to
  three rows other bits (the last two rows of a 32-row block; for a layer of 32 inputs, rows 126-127 and 254-255 of
  a 256-row one on two threads). So the sizes are the machine's: where its probe (:mod:`dsgen.generation.invariance`,
  :func:`~dsgen.generation.kernels.model_counts`) found 256 (and 32) among the row counts at which its matrix
  multiply gives every row the bits of a large batch wherever it sits, those; else the smallest such count above
  them (48 rows of SmolLM2's head on the Intel AVX2 path), or the largest found (30 for a tiny model there). Every CPU
  met but that path has 256 and 32 among its counts (MKL on AMD EPYC, AVX2 and AVX-512; on an Intel Xeon with
  AVX-512), so the bits are those of earlier releases there. The judge, which gets no probe's record, measures the
  model's counts itself (a fraction of a second, once per process, model and thread count); where no count is
  invariant at all, every prompt runs alone, so where its rows sit depends on it alone. Unprobed (a GPU): 256 and
  32.
- **The last block cut to size where the probe allows**: the tokens a last block would hold are multiplied in
  blocks of the probed counts instead (:func:`fixed_blocks`; an AMD EPYC: one block of exactly their number; an
  Intel Xeon: counts of 16-56): the same bits, without the padding (a chunk's 54-token instruction heads, once 256
  rows, are 54; :file:`results/benchmarks.md`).
- **Attention one prompt at a time** (:func:`prompt_attention`): a prompt's queries attend to its own keys
  only (its cached past, then its new tokens), ``[rep * QUERY_BLOCK, D] x [D, L]`` per block of
  ``QUERY_BLOCK`` (16) query positions aligned to multiples of 16 (zero queries fill a block), per key-value
  head, ``L`` the prompt's own length (at least :func:`~dsgen.generation.kernels.invariant_key_columns`,
  masked zero keys beyond it). Every shape, and where in it a query or key sits, is a function of the
  prompt and the position alone, so the scores, the softmax over ``L`` columns (PyTorch's or the exact-sum
  one, :func:`~dsgen.generation.decode_step.exact_softmax`) and the weighted sum of values are the same bits
  fed whole or after a cached prefix, alone or beside any prompts.

What the blocks rest on: a matrix multiply (``mm``, ``addmm``, one matrix of a ``bmm``) at a probed row count gives
an output element bits that depend on the operands' shapes, the element's column and its row's values, never on the
values of other rows or where the row sits; elementwise operations and a row's own reductions (a norm, the softmax)
are row by row. The probe (:mod:`dsgen.generation.invariance`) also checks the prefill on the machine that runs,
with all its prompts in one batch (every row of a head block) as well as in small ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dsgen.generation.decode_step import blocked_linears, exact_softmax
from dsgen.generation.kernels import Kernels, invariant_key_columns, row_blocks

PREFILL_ROWS = 256  # token rows per block of every linear layer in a prefill
HEAD_ROWS = 32  # prompts per block of the output head in a prefill (only each prompt's last token)
QUERY_BLOCK = 16  # query positions per block of a prompt's attention, aligned to multiples of it
PREFILL_ATTENTION = {"softmax": "dsgen_prefill", "exact-sum": "dsgen_prefill_exact"}  # softmax -> name


def fixed_blocks(rows: int, size: int, counts: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Row blocks of ``size`` rows each, as many as ``rows`` fills whole; the rest in one more block of ``size``
    (zero rows pad it), or, where the machine's probe found ``size`` among the batch-invariant row counts
    ``counts``, in blocks of those counts (:func:`~dsgen.generation.kernels.row_blocks`): the same bits
    (every count in ``counts`` gives a row the bits of any large batch, ``size`` included) with less padding.
    Where the probe found counts but not ``size``, the smallest count above it takes its place: a block of
    ``size`` rows need not give a row the same bits wherever it sits in the block (MKL on an Intel CPU's AVX2
    path gives the last two rows of a 32-row product bits of their own), a probed count does."""
    if counts and size not in counts:
        size = next((c for c in counts if c >= size), counts[-1])
    whole, rest = divmod(rows, size)
    if rest and size in counts:
        return (size,) * whole + row_blocks(rest, tuple(counts))
    return (size,) * max(1, -(-rows // size))


def prefill_rows(rows: int, counts: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Row blocks of a prefill's linear layers: ``PREFILL_ROWS`` each (:func:`fixed_blocks`)."""
    return fixed_blocks(rows, PREFILL_ROWS, counts)


def head_rows(rows: int, counts: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Row blocks of a prefill's output head: ``HEAD_ROWS`` each (:func:`fixed_blocks`)."""
    return fixed_blocks(rows, HEAD_ROWS, counts)


@dataclass
class Packing:
    """Where each prompt's tokens are in a packed prefill.

    Args:
        starts / lengths: the first packed position of each prompt's new tokens, and how many.
        past: the tokens each prompt has in ``past_keys`` before its new ones (0: none).
        past_keys / past_values: per layer ``[prompts, Hkv, P, D]``, each prompt's past right-aligned, or None.
    """

    starts: tuple[int, ...]
    lengths: tuple[int, ...]
    past: tuple[int, ...]
    past_keys: list[Any] | None = None
    past_values: list[Any] | None = None
    layouts: dict = field(default_factory=dict)  # (window, dtype, device, Hkv, rep, D) -> its groups, for every layer


_PACKING: contextvars.ContextVar[Packing | None] = contextvars.ContextVar("dsgen_packing", default=None)


@dataclass
class _Group:
    """The prompts of a packing whose keys are as wide, as one batched multiply (index tensors into
    the packed queries, the keys' sources and the output)."""

    width: int
    queries: Any      # [nb * QUERY_BLOCK]: packed position of each block row's query, T for a zero query
    keys: Any         # [nb, width]: index of each block's key column in the keys' sources (zero: the last)
    mask: Any         # [nb * Hkv, rep * QUERY_BLOCK, width], additive
    rows: Any         # [real queries]: their block rows among nb * QUERY_BLOCK
    targets: Any      # [real queries]: their packed positions


def key_width(keys: int, smallest: int) -> int:
    """Key columns a prompt of ``keys`` keys is attended over: a multiple of ``QUERY_BLOCK`` (masked zero
    keys after its own), at least ``smallest``: a function of the prompt alone."""
    return max(-(-keys // QUERY_BLOCK) * QUERY_BLOCK, smallest)


def _layout(packing: Packing, hkv: int, rep: int, d: int, window: int | None, dtype: Any, device: Any) -> list[_Group]:
    """The groups of a packing (computed once per forward pass, used by every layer). Keys' sources:
    the packed new keys ``[0, T)``, then every prompt's past (``T + r * P + j``), then one zero key."""
    import torch

    key = (window, dtype, device, hkv, rep, d)
    if key in packing.layouts:
        return packing.layouts[key]
    total = sum(packing.lengths)
    wp = packing.past_keys[0].shape[2] if packing.past_keys is not None else 0
    zero = total + len(packing.lengths) * wp
    smallest = invariant_key_columns(d)
    by_width: dict[int, list[int]] = {}
    for r, (n, p) in enumerate(zip(packing.lengths, packing.past)):
        by_width.setdefault(key_width(p + n, smallest), []).append(r)
    lowest = torch.finfo(dtype).min
    groups = []
    for width, members in sorted(by_width.items()):
        queries, keys, allowed, rows, targets = [], [], [], [], []
        for r in members:
            s, n, p = packing.starts[r], packing.lengths[r], packing.past[r]
            first, last = p // QUERY_BLOCK, (p + n - 1) // QUERY_BLOCK
            at = torch.arange(first * QUERY_BLOCK, (last + 1) * QUERY_BLOCK)  # each block row's position
            real = (at >= p) & (at < p + n)
            rows.append(torch.nonzero(real).flatten() + sum(len(q) for q in queries))
            targets.append(at[real] - p + s)
            queries.append(torch.where(real, at - p + s, torch.tensor(total)))
            cols = torch.arange(width)
            source = torch.where(cols < p, total + r * wp + (wp - p) + cols, s + cols - p)  # past, then new
            source = torch.where(cols < p + n, source, torch.tensor(zero))
            keys.append(source.expand(last - first + 1, width))
            ok = (cols[None, :] <= at[:, None]) & (cols[None, :] < p + n)
            if window:
                ok &= cols[None, :] > at[:, None] - window
            allowed.append(ok)
        nb = sum(k.shape[0] for k in keys)
        mask = torch.zeros((nb * QUERY_BLOCK, width), dtype=dtype).masked_fill_(~torch.cat(allowed), lowest)
        mask = (mask.view(nb, 1, 1, QUERY_BLOCK, width).expand(nb, hkv, rep, QUERY_BLOCK, width)
                .reshape(nb * hkv, rep * QUERY_BLOCK, width))
        groups.append(_Group(width, torch.cat(queries).to(device), torch.cat(keys).to(device), mask.to(device),
                             torch.cat(rows).to(device), torch.cat(targets).to(device)))
    packing.layouts[key] = groups
    return groups


def prompt_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
                     dropout: float = 0.0, exact_sum: bool = False, **kwargs: Any) -> tuple[Any, None]:
    """Causal attention of packed prompts, each to its own keys only (transformers' attention-interface
    signature; the packing is :func:`packed_prefill`'s). See the module docstring for the shapes.

    Args:
        query: ``[1, H, T, D]``, the packed new tokens of every prompt.
        key / value: ``[1, Hkv, T, D]``, their keys and values (the cache held nothing before them); a
            prompt's cached past comes from the packing.
        attention_mask: ignored (None: the mask is each prompt's own causal one, with the module's sliding
            window if it has one).
    Returns:
        ``([1, T, H, D], None)``.
    """
    import torch

    packing = _PACKING.get()
    if packing is None:
        raise RuntimeError("prompt_attention runs only inside packed_prefill")
    if dropout or getattr(module, "sinks", None) is not None:
        from dsgen.errors import DsgenError

        raise DsgenError("the exact prefill does not support attention dropout or attention sinks")
    _, h, total, d = query.shape
    hkv = key.shape[1]
    rep = h // hkv
    scale = d ** -0.5 if scaling is None else scaling
    softcap = kwargs.get("softcap")
    layer = getattr(module, "layer_idx", 0)

    def sources(new: Any, past: list[Any] | None) -> Any:  # [Hkv, T + B * P + 1, D]
        parts = [new[0]]
        if past is not None:
            parts.append(past[layer].transpose(0, 1).reshape(hkv, -1, d))
        parts.append(new.new_zeros(hkv, 1, d))
        return torch.cat(parts, dim=1)

    keys, values = sources(key, packing.past_keys), sources(value, packing.past_values)
    queries = torch.cat([query[0], query.new_zeros(h, 1, d)], dim=1)  # a zero query at T
    out = query.new_zeros(h, total, d)
    for g in _layout(packing, hkv, rep, d, kwargs.get("sliding_window"), query.dtype, query.device):
        nb = g.keys.shape[0]
        q = (queries[:, g.queries].view(hkv, rep, nb, QUERY_BLOCK, d).permute(2, 0, 1, 3, 4)
             .reshape(nb * hkv, rep * QUERY_BLOCK, d))
        k = keys[:, g.keys.flatten()].view(hkv, nb, g.width, d).transpose(0, 1).reshape(nb * hkv, g.width, d)
        v = values[:, g.keys.flatten()].view(hkv, nb, g.width, d).transpose(0, 1).reshape(nb * hkv, g.width, d)
        scores = torch.bmm(q, k.transpose(1, 2))
        scores.mul_(scale)
        if softcap:
            scores = torch.tanh(scores / softcap) * softcap
        scores.add_(g.mask)
        probs = exact_softmax(scores.float()) if exact_sum else torch.softmax(scores, dim=-1, dtype=torch.float32)
        weighted = torch.bmm(probs.to(value.dtype), v)  # [nb * Hkv, rep * QUERY_BLOCK, D]
        weighted = weighted.view(nb, hkv, rep, QUERY_BLOCK, d).permute(1, 2, 0, 3, 4).reshape(h, nb * QUERY_BLOCK, d)
        out[:, g.targets] = weighted[:, g.rows]
    return out.transpose(0, 1)[None], None


def _register() -> None:
    from transformers import AttentionInterface

    for softmax, name in PREFILL_ATTENTION.items():
        if name not in AttentionInterface._global_mapping:  # no mask function: transformers builds no mask
            AttentionInterface.register(name, functools.partial(prompt_attention, exact_sum=softmax == "exact-sum"))


@contextlib.contextmanager
def packed_prefill(model: Any, packing: Packing, attention: str = "softmax", kernels: Kernels = Kernels(())
                   ) -> Iterator[None]:
    """Within the block, a forward pass of ``model`` over packed prompts (``[1, T]`` token ids, each
    token's own position) computes every prompt's bits on their own (module docstring): attention by
    :func:`prompt_attention` with PyTorch's softmax or the exact-sum one (``attention``), linear layers
    in fixed row blocks of a count of ``kernels`` (each by the kernel ``kernels`` names for it,
    :func:`~dsgen.generation.decode_step.block_product`). The model's attention implementation is restored after."""
    _register()
    cfg = model.config
    before = cfg._attn_implementation
    token = _PACKING.set(packing)
    cfg._attn_implementation_internal = PREFILL_ATTENTION[attention]
    try:
        with blocked_linears(model, functools.partial(prefill_rows, counts=kernels.counts),
                             head_rows=functools.partial(head_rows, counts=kernels.counts), kernels=kernels):
            yield
    finally:
        cfg._attn_implementation_internal = before
        _PACKING.reset(token)


__all__ = ["PREFILL_ROWS", "HEAD_ROWS", "QUERY_BLOCK", "Packing", "prompt_attention", "packed_prefill", "prefill_rows",
           "head_rows"]
