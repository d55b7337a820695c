"""Batch-invariant forward passes: a sequence's logits must not depend on what it is batched with.

The decode loop (:mod:`dsgen.generation.decoding`) shares one row between every sample whose
sequence is the same so far, forks it when their tokens differ, and moves rows to fill the
slots of finished ones. That saves work only if it changes nothing: the logits of a sequence
must be the same bits whichever rows it is batched with, in whatever slot, on however many
threads. Four things make a forward pass *batch-invariant* on the CPU:

- **Attention** runs as one batched matrix multiply per row and key-value head
  (:func:`row_attention`), registered with transformers' attention interface for the duration of
  the pass (:func:`invariant_forward`). PyTorch's fused CPU kernel
  (``scaled_dot_product_attention``) is not batch-invariant: its result for a row depends on
  which thread handled the row, so on the batch size and on the thread count (a Ray actor with
  one thread and a local run with two would differ). The batched matmul is invariant, and for a
  one-token step on this CPU it is also faster (3.9 ms against 7.0 ms per layer at 256 rows).
- **The softmax over key columns**: a row's real keys sit at different columns, and among
  different numbers of masked ones, depending on what the row is batched with. PyTorch's fused
  softmax sums a row in vector lanes with a scalar tail, so its sum can depend on the row's width:
  on an AVX2 CPU it does not (for the widths probed), on AVX-512 it does (16 lanes: 12 real
  columns alone are summed as a tail, in a 98-wide row as part of a vector). Where the
  machine's probe (:mod:`dsgen.generation.invariance`) finds that, the softmax's sum is taken
  exactly instead (:func:`exact_softmax`): every term is rounded to a multiple of 2^-40 and summed in
  float64, where such a sum has no rounding at all, so it is the same bits in any order, width or
  lane layout (invariant by construction, at a relative cost of a few percent of a step).
- **Row counts and kernels**: a linear layer gives every row the bits of a large batch only at some row counts
  (MKL on a 2-core AMD EPYC: 4, 8 and every count from 12 on; on an Intel Xeon's AVX-512 path 16-56 and from 193
  on, and 2-56 with the weight times the rows' transpose, another kernel), probed on the CPU it runs on at the model's
  own layer shapes (:mod:`dsgen.generation.kernels`). A step's rows are cut into blocks of those counts, as few and
  with as little padding as the counts allow (:func:`~dsgen.generation.kernels.row_blocks`: one block on the AMD
  EPYC; 56 + 44 for 100 rows, 208 for 150, on the Xeon), and every linear layer runs block by block, each block
  with the kernel probed for its count (:func:`blocked_linears`).
- **The output head** is computed in blocks of ``HEAD_BLOCK`` vocabulary columns (:func:`blocked_head`): the
  same bits as one matrix multiply on the CPUs met but an Intel CPU's AVX2 path (each logit is the same dot
  product), 1.3-1.5x faster on this CPU because a block of the weight matrix stays in cache; there, the same bits
  on one thread as on two.

A prompt's prefill is made exact differently, by shapes that are a function of the prompt alone (row blocks of
one probed count; :mod:`dsgen.generation.prefill_step`); it uses :func:`blocked_linears` and :func:`exact_softmax`
from here.

Written here because transformers offers a per-model choice of attention but no batch-invariant
kernel, and no blocked output head. The maths are those of the model's own attention (scaled dot
product, mask, softmax, weighted sum); the tests check them against the model's forward pass.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from dsgen.generation.kernels import (HEAD_BLOCK, ONEDNN, Kernels, invariant_key_columns, invariant_rows, is_conv1d,
                                     onednn, transposed)

ROW_ATTENTION = "dsgen_rows"  # the name under which :func:`row_attention` is registered
ROW_ATTENTION_EXACT = "dsgen_rows_exact"  # the same with :func:`exact_softmax`
ATTENTION_NAMES = {"softmax": ROW_ATTENTION, "exact-sum": ROW_ATTENTION_EXACT}  # a probe's choice -> name
EXACT_QUANTUM = 2.0 ** -40  # exact_softmax rounds each term to a multiple of this before its exact sum
_SAME_MATHS = ("sdpa", "eager")  # attention implementations whose maths row_attention reproduces


def exact_softmax(scores: Any) -> Any:
    """Softmax over the last dimension whose sum has no rounding, so a row's probabilities are the
    same bits whatever its width, the position of its real columns and the CPU's vector lanes.

    The maximum is exact in any order and ``exp`` is elementwise; the sum is the one reduction that
    rounds. Each term (in [0, 1]) is rounded to a multiple of 2^-40 and the terms are added in
    float64: ``L`` such terms (``L < 2^12``) add up to an integer multiple of 2^-40 below 2^52,
    which float64 holds exactly, so every order of addition gives the same sum. That sum differs
    from the true one by under ``L * 2^-41``, relative to a sum >= 1 (the largest term is 1):
    below float32's resolution, so the probabilities are as accurate as the fused kernel's.
    """
    import torch

    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True)).double()
    total = torch.round(e / EXACT_QUANTUM).sum(dim=-1, keepdim=True) * EXACT_QUANTUM
    return (e / total).float()


def row_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
                  dropout: float = 0.0, exact_sum: bool = False, **kwargs: Any) -> tuple[Any, None]:
    """Scaled dot-product attention as one batched matrix multiply per row and key-value head
    (transformers' attention-interface signature).

    Args:
        query: ``[B, H, Q, D]``.
        key / value: ``[B, Hkv, L, D]`` (H a multiple of Hkv: grouped-query attention).
        attention_mask: ``[B, 1, Q, L]``, boolean (True: attend) or additive; None for plain causal.
        exact_sum: the softmax's sum without rounding (:func:`exact_softmax`) instead of PyTorch's fused
            softmax, where the machine's probe found the latter's bits depend on the row's width.
    Returns:
        ``([B, Q, H, D], None)``, as transformers' SDPA attention returns it.

    Masked keys get the dtype's lowest value rather than -inf, so a query that attends to nothing
    (a left-padding position of a prefill) gets a finite average instead of NaN; any query that
    attends to something gets exactly the weights -inf would give it. Falls back to transformers'
    SDPA attention for what it does not cover (logit soft-capping, attention sinks, dropout).
    """
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, q_len, d = query.shape
    hkv, length = key.shape[1], key.shape[2]
    if (kwargs.get("softcap") is not None or getattr(module, "sinks", None) is not None or dropout
            or h % hkv or value.shape[-1] != d
            or (attention_mask is not None and (attention_mask.dim() != 4 or attention_mask.shape[1] != 1
                                                or attention_mask.shape[-1] != length))):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    rep = h // hkv
    scale = d ** -0.5 if scaling is None else scaling
    lowest = torch.finfo(query.dtype).min
    if attention_mask is None:  # causal: query i sees keys up to i + (L - Q)
        keys = torch.arange(length, device=query.device)
        queries = torch.arange(q_len, device=query.device) + (length - q_len)
        attention_mask = (keys[None, :] <= queries[:, None])[None, None]
    if attention_mask.dtype == torch.bool:
        additive = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device)
        attention_mask = additive.masked_fill_(~attention_mask, lowest)
    else:
        attention_mask = attention_mask.to(query.dtype).clamp_min(lowest)
    # the query heads of one key-value head share its keys: [B*Hkv, M, D] x [B*Hkv, D, L], M = rep*Q.
    # Below 12 (but 4 and 8) a score depends on its key's column modulo 4, so on how far a row is
    # padded, and a short L differs from a long one: a multi-token call (not dsgen's prefill, which is
    # prefill_step's) pads M with zero queries and L with masked zero keys (:func:`invariant_key_columns`),
    # as earlier releases' prefill did. A one-token step keeps M = rep
    # and L: within a decode call every row has the same L and a row's alignment follows from the
    # schedule alone (sharing and moving rows keep it), and padding would change the bits of every
    # step relative to earlier releases of dsgen, so, rarely, a sampled token.
    m = rep * q_len
    q = query.reshape(b * hkv, m, d)
    keys, values = key.reshape(b * hkv, length, d), value.reshape(b * hkv, length, d)
    if q_len > 1 and invariant_rows(m) != m:
        q = torch.cat([q, q.new_zeros(b * hkv, invariant_rows(m) - m, d)], dim=1)
    if q_len > 1 and length < invariant_key_columns(d):
        extra = invariant_key_columns(d) - length
        keys = torch.cat([keys, keys.new_zeros(b * hkv, extra, d)], dim=1)
        values = torch.cat([values, values.new_zeros(b * hkv, extra, d)], dim=1)
        attention_mask = torch.nn.functional.pad(attention_mask, (0, extra), value=lowest)
        length += extra
    scores = torch.bmm(q, keys.transpose(1, 2))
    real = scores[:, :m].view(b, hkv, rep, q_len, length)
    real.mul_(scale).add_(attention_mask.view(attention_mask.shape[0], -1, 1, q_len, length))
    probs = (exact_softmax(scores.float()) if exact_sum else torch.softmax(scores, dim=-1, dtype=torch.float32))
    probs = probs.to(value.dtype)
    out = torch.bmm(probs, values)[:, :m]
    return out.reshape(b, h, q_len, d).transpose(1, 2), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    for name, exact in ((ROW_ATTENTION, False), (ROW_ATTENTION_EXACT, True)):
        if name not in AttentionInterface._global_mapping:
            AttentionInterface.register(name, functools.partial(row_attention, exact_sum=exact))
        if name not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:  # masks prepared as for SDPA
            ALL_MASK_ATTENTION_FUNCTIONS.register(name, sdpa_mask)


def block_product(x: Any, w: Any, bias: Any, out: Any, kernels: Kernels = Kernels(())) -> None:
    """``x`` (a block of rows) times ``w`` (a linear layer's weight as ``[in, out]``, the transpose of a
    ``torch.nn.Linear``'s) plus ``bias``, written into ``out``, by the kernel the probe chose for the block
    (``kernels``): :func:`~dsgen.generation.kernels.onednn` where its library is oneDNN's, else
    :func:`~dsgen.generation.kernels.transposed` where the block's row count is one of its transposed counts (no
    bias), else PyTorch's ``mm`` (``addmm`` with a bias). The one choice of :func:`blocked_head` and
    :func:`row_blocked`."""
    import torch

    if kernels.library == ONEDNN:
        out.copy_(onednn(x, kernels.onednn_weight(w.t()), bias))
    elif x.shape[0] in kernels.transposed and bias is None:
        out.copy_(transposed(x, w.t()))
    elif bias is None:
        torch.mm(x, w, out=out)
    else:
        torch.addmm(bias, x, w, out=out)


def blocked_head(head: Any, block: int = HEAD_BLOCK, out: Any = None,
                 rows: Callable[[int], tuple[int, ...]] | None = None, kernels: Kernels = Kernels(())) -> Any:
    """``forward`` for a linear output head that multiplies one block of vocabulary columns at a time,
    writing into ``out`` (``[rows, vocab]``, reused across calls) when the rows fit, else into a new
    tensor. A reused buffer matters on the CPU: a fresh 50 MB tensor per step is fresh memory pages,
    and touching them the first time costs as much as a tenth of the step. With ``rows`` (a plan of
    row blocks, :func:`~dsgen.generation.kernels.row_blocks`), the rows too are multiplied block by block (zero
    rows pad the last); each block by the kernel ``kernels`` names for it (:func:`block_product`)."""
    import torch

    weight, bias = head.weight, head.bias

    def forward(hidden: Any) -> Any:
        if torch.is_grad_enabled() and (weight.requires_grad or hidden.requires_grad):  # out= cannot record a graph
            return torch.nn.functional.linear(hidden, weight, bias)
        flat = hidden.reshape(-1, hidden.shape[-1])
        n, vocab = flat.shape[0], weight.shape[0]
        plan = rows(n) if rows is not None else (n,)
        total = sum(plan)
        if total > n:
            flat = torch.cat([flat, flat.new_zeros(total - n, flat.shape[1])])
        dtype = torch.result_type(flat, weight)
        if out is not None and out.shape[0] >= total and out.shape[1] == vocab and out.dtype == dtype:
            logits = out[:total]
        else:
            logits = torch.empty((total, vocab), dtype=dtype, device=flat.device)
        for start in range(0, vocab, block):
            stop = min(start + block, vocab)
            w = weight[start:stop].t()
            r = 0
            for m in plan:
                block_product(flat[r:r + m], w, None if bias is None else bias[start:stop],
                              logits[r:r + m, start:stop], kernels)
                r += m
        return logits[:n].view(*hidden.shape[:-1], vocab)

    return forward


@contextlib.contextmanager
def blocked_output_head(model: Any, out: Any = None, rows: Callable[[int], tuple[int, ...]] | None = None,
                        kernels: Kernels = Kernels(())) -> Iterator[None]:
    """Within the block, the model's linear output head runs block by block (same values, faster on
    the CPU), into ``out`` when given, its rows in the blocks ``rows`` plans, each by the kernel ``kernels`` names for
    it (see :func:`blocked_head`).

    The head module stays in place, so hooks registered on it still see every output."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plain = (isinstance(head, torch.nn.Linear) and type(head).forward is torch.nn.Linear.forward
             and "forward" not in vars(head) and head.weight.device.type == "cpu")
    if not plain:
        yield
        return
    head.forward = blocked_head(head, out=out, rows=rows, kernels=kernels)
    try:
        yield
    finally:
        del head.forward


def row_blocked(module: Any, rows: Callable[[int], tuple[int, ...]], kernels: Kernels = Kernels(())) -> Any:
    """``forward`` for a linear layer (``torch.nn.Linear``, or GPT-2's ``Conv1D``, whose weight is
    ``[in, out]``) that multiplies its input rows in the blocks ``rows(n)`` plans, zero rows padding
    the last: each block is the matrix multiply the layer itself runs (``mm``, or ``addmm`` with a
    bias), at the block's row count, or by the kernel ``kernels`` names for it (:func:`block_product`:
    :func:`~dsgen.generation.kernels.transposed` only for a ``torch.nn.Linear`` without a bias;
    :func:`~dsgen.generation.kernels.onednn` on a ``Conv1D``'s weight as its transposed view, the layout the probe
    checked). A plan of one block of exactly ``n`` rows that runs the layer's own multiply is its own forward,
    untouched."""
    import torch

    own = module.forward
    weight, bias = module.weight, module.bias
    w = weight.t() if isinstance(module, torch.nn.Linear) else weight
    if not (isinstance(module, torch.nn.Linear) and bias is None):
        kernels = kernels._replace(transposed=())

    def forward(x: Any) -> Any:
        n = x.numel() // x.shape[-1] if x.shape[-1] else 0
        plan = rows(n)
        if ((len(plan) == 1 and plan[0] == n and kernels.own(n))
                or (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))):
            return own(x)
        flat = x.reshape(n, x.shape[-1])
        total = sum(plan)
        if total > n:
            flat = torch.cat([flat, flat.new_zeros(total - n, flat.shape[1])])
        if kernels.library == ONEDNN and len(plan) == 1:  # one block: oneDNN's own output, no copy
            return onednn(flat, kernels.onednn_weight(w.t()), bias)[:n].view(*x.shape[:-1], w.shape[1])
        y = torch.empty((total, w.shape[1]), dtype=torch.result_type(flat, w), device=flat.device)
        r = 0
        for m in plan:
            block_product(flat[r:r + m], w, bias, y[r:r + m], kernels)
            r += m
        return y[:n].view(*x.shape[:-1], w.shape[1])

    return forward


@contextlib.contextmanager
def blocked_linears(model: Any, rows: Callable[[int], tuple[int, ...]], out: Any = None,
                    head_rows: Callable[[int], tuple[int, ...]] | None = None, kernels: Kernels = Kernels(())
                    ) -> Iterator[None]:
    """Within the block, every linear layer of ``model`` multiplies its rows (a step's rows, or a
    prefill's tokens) in the blocks ``rows`` plans, each by the kernel ``kernels`` names for it (:func:`row_blocked`;
    the probe's choice, :func:`~dsgen.generation.kernels.model_kernels`), and the output head also
    by vocabulary columns, into ``out`` when given, its rows in the blocks ``head_rows`` plans (default
    ``rows``; :func:`blocked_output_head`).

    So that a row's bits do not depend on how many rows it is multiplied with: each block's row
    count is one the CPU's kernel gives every row the same bits at (probed:
    :func:`~dsgen.generation.kernels.row_blocks`), or
    the same fixed count for every block (the prefill, :mod:`dsgen.generation.prefill_step`). Only
    plain layers are blocked (a module with a ``forward`` of its own keeps it); hooks on the modules
    still see every call."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    with blocked_output_head(model, out=out, rows=head_rows or rows, kernels=kernels):  # by columns too
        layers = [m for m in model.modules()
                  if "forward" not in vars(m) and getattr(m, "weight", None) is not None and m.weight.dim() == 2
                  and ((isinstance(m, torch.nn.Linear) and type(m).forward is torch.nn.Linear.forward)
                       or is_conv1d(m))]
        for m in layers:
            m.forward = row_blocked(m, (head_rows or rows) if m is head else rows, kernels)
        try:
            yield
        finally:
            for m in layers:
                del m.forward


@contextlib.contextmanager
def invariant_forward(model: Any, attention: str = "softmax") -> Iterator[None]:
    """Within the block, the model's attention is :func:`row_attention` (batch- and thread-invariant),
    with PyTorch's softmax (``attention="softmax"``) or :func:`exact_softmax` (``"exact-sum"``), as
    the machine's probe chose (:func:`dsgen.generation.invariance.numerics`).

    Models whose attention implementation is neither SDPA nor eager (a flash-attention kernel on
    a GPU) keep their own: correct, but not batch-invariant."""
    cfg = getattr(model, "config", None)
    before = getattr(cfg, "_attn_implementation", None)
    if before not in _SAME_MATHS and before not in ATTENTION_NAMES.values():
        yield
        return
    _register()
    cfg._attn_implementation_internal = ATTENTION_NAMES[attention]
    try:
        yield
    finally:
        cfg._attn_implementation_internal = before


__all__ = ["exact_softmax", "row_attention", "block_product", "blocked_head", "blocked_output_head", "row_blocked",
           "blocked_linears", "invariant_forward", "ROW_ATTENTION", "ROW_ATTENTION_EXACT", "ATTENTION_NAMES"]
