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
- **Row counts**: a linear layer gives every row the same bits at any row count from 12 on (and
  at 4 and 8) with MKL on a 2-core AMD EPYC (AVX2 and AVX-512 alike), not at 1-3, 5-7 or 9-11; on an
  Intel Xeon (AVX-512, no bf16) only at 16-56 and from 193 on (MKL's middle kernel, 57-192 rows, rounds
  otherwise); on an Intel
  CPU's AVX2 path at 48 on (two threads; 56 on at one) for SmolLM2, and for a tiny model's narrow layers, whose
  512-row batch gives some rows bits of their own, only at 4-6, 10-12, ... 28-30 (the bits of 4-row blocks). A
  step's rows are cut into blocks whose counts are batch-invariant (:func:`row_blocks`, as few and as
  little padding as the counts allow: one block on the AMD EPYC; 56 + 44 for 100 rows, 208 for 150, on the Xeon),
  probed on the CPU it runs on, at the model's own layer shapes (:func:`invariant_counts`), and
  every linear layer runs block by block (:func:`blocked_linears`).
- **Two kernels per count**: a block's product can also be computed as the weight times the rows' transpose
  (:func:`transposed`), which MKL runs with another kernel. On an Intel Xeon's AVX-512 path that kernel gives a row
  the bits of the large batch at every count from 2 to 56, in 0.4-0.8 of the plain multiply's time, so a short step
  (the last tries of each item) is neither padded to 16 rows nor run on the slow small kernel there. Which counts run
  that way is probed with the counts (:func:`transposed_counts`: where it is invariant and the plain multiply is not,
  or where it is timed faster); on the AMD EPYC's paths and an Intel CPU's AVX2 path no count is.
- **The output head** is computed in blocks of ``HEAD_BLOCK`` vocabulary columns (:func:`blocked_head`): the
  same bits as one matrix multiply on the CPUs met but an Intel CPU's AVX2 path (each logit is the same dot
  product), 1.3-1.5x faster on this CPU because a block of the weight matrix stays in cache; there, the same bits
  on one thread as on two.

A prompt's prefill is made exact differently, by shapes that are a function of the prompt alone (row blocks of
one probed count; :mod:`dsgen.generation.prefill_step`); it uses :func:`blocked_linears`, :func:`model_counts` and
:func:`exact_softmax` from here.

Written here because transformers offers a per-model choice of attention but no batch-invariant
kernel, and no blocked output head. The maths are those of the model's own attention (scaled dot
product, mask, softmax, weighted sum); the tests check them against the model's forward pass.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

ROW_ATTENTION = "dsgen_rows"  # the name under which :func:`row_attention` is registered
ROW_ATTENTION_EXACT = "dsgen_rows_exact"  # the same with :func:`exact_softmax`
ATTENTION_NAMES = {"softmax": ROW_ATTENTION, "exact-sum": ROW_ATTENTION_EXACT}  # a probe's choice -> name
EXACT_QUANTUM = 2.0 ** -40  # exact_softmax rounds each term to a multiple of this before its exact sum
# vocabulary columns per block of the output head (a 3.5 MB block for SmolLM2). 1536, not 2048: on an Intel CPU's AVX2
# path MKL gives the last 8 columns of a 1024- or 2048-column product other bits on one thread than on two (MKL splits
# the columns between its threads); at 1536 every CPU kind met gives one and two threads the same bits, and on AMD
# paths and an AVX-512 Xeon's the bits of 2048-column blocks (each logit is the same dot product)
HEAD_BLOCK = 1536
# row_blocks: a block costs as much as this many more rows: a 16-56-row multiply on an AVX-512 Xeon's MKL path takes
# about the time of 36 more rows of a large one (12 on an AMD EPYC, 5 on an Intel CPU's AVX2 path; results/benchmarks.md)
BLOCK_COST = 32
ROW_BLOCK_LIMIT = 4096  # row_blocks: steps beyond this many rows are cut into blocks of at most LARGE_ROWS[-1]
_SAME_MATHS = ("sdpa", "eager")  # attention implementations whose maths row_attention reproduces


PROBED_ROWS = 64  # every row count up to this is probed
# and these beyond it (a decode step's rows at batch 512): every 16th, so that a step pads at most 15 rows where only
# the large kernel is invariant (an AVX-512 Xeon's MKL path: from 193 rows on), and two odd counts
LARGE_ROWS = tuple(sorted({*range(80, 513, 16), 129, 257}))
KEY_COLUMNS = 96  # key widths below this are probed (a prompt's 18-token instruction head and its input)
LAYER_SHAPES = ((576, 1536), (1536, 576), (64, 192))  # (in, out) probed for any model: SmolLM2's MLP, a head's


def _per_thread_count(measure: Callable[..., Any]) -> Callable[..., Any]:
    """Remember what ``measure`` (a probe of this CPU's kernels) answers per argument and thread count: a
    kernel's bits can depend on how many threads split its work, so an answer found at one thread count is
    never given at another. ``cache_clear`` forgets every answer."""
    @functools.lru_cache(maxsize=None)
    def at(threads: int, *args: Any) -> Any:
        return measure(*args)

    @functools.wraps(measure)
    def measured(*args: Any) -> Any:
        import torch

        return at(torch.get_num_threads(), *args)

    measured.cache_clear = at.cache_clear  # type: ignore[attr-defined]
    return measured


@_per_thread_count
def invariant_counts(shapes: tuple[tuple[int, int], ...] = LAYER_SHAPES) -> tuple[int, ...]:
    """The row counts at which this CPU's float32 matrix multiply, on the process's current thread count, gives
    every row the bits it gets in a batch of ``LARGE_ROWS[-1]`` (512) rows, for linear layers of the given
    ``(in, out)`` shapes: every count up to ``PROBED_ROWS`` and the sampled larger counts ``LARGE_ROWS``
    (measured once per process, shape set and thread count, on seeded data; about 0.5 s for the default set).
    MKL on a 2-core AMD EPYC (AVX2 or AVX-512) at two threads: 4, 8 and every count from 12 on; at one thread
    every count from 4 on. The thread count is part of the answer (MKL splits a multiply's rows between its
    threads), so a count found at one thread count is never used at another; another BLAS or CPU may choose
    its small-batch kernels elsewhere, which is why this is probed rather than written down.

    A count passes only if its rows get the reference's bits at both ends of the batch, so each of its rows gets the
    bits the reference gives that row, wherever it sits, provided the reference does: its rows are checked for that
    (the batch again, rolled by one row; a row's bits that depend on its position differ somewhere between two
    neighbours). MKL's small-matrix path on an Intel CPU with AVX2 multiplies rows six at a time and gives the rows of
    a tail of one to three other bits, so a 512-row batch of a narrow layer (32 inputs) on one thread (512 = 85 x 6
    + 2) gives its last two rows bits of their own: there the reference of every shape is its rows in blocks of
    ``SMALL_BLOCK`` (the counts 4-6, 10-12, 16-18... give those bits), and where that fails too, no count is invariant
    and the answer is empty."""
    import torch

    found = _reference(shapes)
    if found is None:
        return ()
    layers, fulls = found
    reference = LARGE_ROWS[-1]
    counts = set(range(1, PROBED_ROWS + 1)) | set(LARGE_ROWS)
    for (w, x), full in zip(layers, fulls):
        counts = {m for m in counts if all(torch.equal(torch.nn.functional.linear(x[s:s + m], w), full[s:s + m])
                                           for s in (0, reference - m))}
    return tuple(sorted(counts))


def _reference(shapes: tuple[tuple[int, int], ...]) -> tuple[list[tuple[Any, Any]], list[Any]] | None:
    """Seeded ``(weight, rows)`` per shape and the rows' products in the probes' reference batch: one block of
    ``LARGE_ROWS[-1]`` rows, else blocks of ``SMALL_BLOCK``, whichever gives a row the same bits wherever it sits
    (:func:`invariant_counts`); None where neither does."""
    import torch

    gen = torch.Generator().manual_seed(0)
    reference = LARGE_ROWS[-1]
    layers = [(torch.randn(n, k, generator=gen), torch.randn(reference, k, generator=gen)) for k, n in shapes]
    for block in (reference, SMALL_BLOCK):  # the reference: one block, else blocks of SMALL_BLOCK rows
        fulls = [_in_blocks(x, w, block) for w, x in layers]
        # a row whose bits depend on where it sits gets other bits than a neighbour somewhere: the rows rolled by one
        if all(torch.equal(_in_blocks(torch.roll(x, 1, 0), w, block), torch.roll(full, 1, 0))
               for (w, x), full in zip(layers, fulls)):
            return layers, fulls
    return None


def transposed(x: Any, w: Any) -> Any:
    """``x`` times the transpose of ``w`` (a linear layer's ``[out, in]`` weight, no bias) computed as ``w`` times
    the transpose of ``x``: the same products, another kernel (the row count is the matrix multiply's other
    dimension), whose bits at a row count may differ from the plain multiply's."""
    import torch

    return torch.mm(w, x.t()).t()


@_per_thread_count
def transposed_counts(shapes: tuple[tuple[int, int], ...] = LAYER_SHAPES, timed: bool = True) -> tuple[int, ...]:
    """The row counts, up to ``PROBED_ROWS``, at which a step's blocks run :func:`transposed`: where that gives
    every row the bits of :func:`invariant_counts`' reference (so any mix of the two kernels gives a row the same
    bits), and either the plain multiply does not there or this is faster, as timed on the shapes (at most
    ``TRANSPOSED_SHARE`` of its time at three counts both pass; ``timed=False``: every count it is invariant at).

    MKL on an Intel Xeon's AVX-512 path (emulated on an AMD EPYC) multiplies 2-56 rows this way with the bits of a
    512-row batch, where the plain multiply has them only at 16-56, in 0.4-0.8 of its time (16 rows of SmolLM2's
    layers: 0.87 ms against 2.05); on an AMD EPYC's paths the plain multiply is invariant wherever this is and as fast
    or faster, and on an Intel CPU's AVX2 path this is invariant nowhere, so no count is run this way there. Which
    kernel a count runs changes speed only: either gives a row the reference's bits."""
    import torch

    found = _reference(shapes)
    if found is None:
        return ()
    layers, fulls = found
    reference = LARGE_ROWS[-1]
    counts = set(range(1, PROBED_ROWS + 1))
    for (w, x), full in zip(layers, fulls):
        counts = {m for m in counts if all(torch.equal(transposed(x[s:s + m], w), full[s:s + m])
                                           for s in (0, reference - m))}
    both = sorted(counts & set(invariant_counts(shapes)))
    if timed and both and not _faster_transposed(layers, both[len(both) // 4::len(both) // 3 + 1][:3]):
        counts -= set(both)
    return tuple(sorted(counts))


TRANSPOSED_SHARE = 0.8  # transposed_counts: a count both kernels pass runs transposed if it takes at most this share


def _faster_transposed(layers: list[tuple[Any, Any]], sample: list[int], rounds: int = 5) -> bool:
    """Whether :func:`transposed` multiplies ``sample``'s row counts through the layers in at most
    ``TRANSPOSED_SHARE`` of the plain multiply's time (the best of ``rounds`` alternating rounds each)."""
    import time

    import torch

    best = {"plain": float("inf"), "transposed": float("inf")}
    for _ in range(rounds):
        for kind, multiply in (("plain", torch.nn.functional.linear), ("transposed", transposed)):
            start = time.perf_counter()
            for m in sample:
                for w, x in layers:
                    multiply(x[:m], w)
            best[kind] = min(best[kind], time.perf_counter() - start)
    return best["transposed"] <= TRANSPOSED_SHARE * best["plain"]


SMALL_BLOCK = 4  # the reference's rows in blocks of this many where one block of them is not invariant


def _in_blocks(x: Any, w: Any, block: int) -> Any:
    """``x`` times ``w`` (a linear layer's), its rows multiplied ``block`` at a time."""
    import torch

    return torch.cat([torch.nn.functional.linear(x[i:i + block], w) for i in range(0, x.shape[0], block)])


def layer_shapes(model: Any) -> tuple[tuple[int, int], ...]:
    """(in, out) of every distinct linear layer of ``model`` (and of the output head's blocks)."""
    import torch

    shapes = set()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear):
            shapes.add((int(weight.shape[1]), int(weight.shape[0])))
        elif type(module).__name__ == "Conv1D" and weight is not None and weight.dim() == 2:  # GPT-2's projections
            shapes.add((int(weight.shape[0]), int(weight.shape[1])))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        vocab, hidden = (int(x) for x in head.weight.shape)
        shapes.discard((hidden, vocab))
        shapes.add((hidden, min(vocab, HEAD_BLOCK)))
    return tuple(sorted(shapes))


def model_kernels(model: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(counts, transposed)`` for ``model`` at the current thread count: the row counts at which every linear layer
    (and the default shapes, so that a tiny model's steps are cut as a real one's) gives every row the bits of a large
    batch with one of the two kernels (:func:`invariant_counts`, all shapes against one kind of reference; empty
    where none does), and those of them its blocks run :func:`transposed` (:func:`transposed_counts`; none where a
    layer has a bias or is not a ``torch.nn.Linear``, whose other kernels are not probed)."""
    import torch

    shapes = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(model))))
    counts = invariant_counts(shapes)
    plain = all(isinstance(m, torch.nn.Linear) and m.bias is None for m in model.modules()
                if getattr(m, "weight", None) is not None and m.weight.dim() == 2
                and (isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"))
    turned = transposed_counts(shapes) if plain and counts else ()
    return tuple(sorted(set(counts) | set(turned))), turned


def model_counts(model: Any) -> tuple[int, ...]:
    """The row counts at which every linear layer of ``model`` gives every row the bits of a large batch, with the
    kernel :func:`model_kernels` picks for the count."""
    return model_kernels(model)[0]


def invariant_rows(rows: int, counts: tuple[int, ...] | None = None) -> int:
    """The row count to pad a step of ``rows`` rows to, so that a linear layer gives each row the bits
    it gets in any large batch: the sum of :func:`row_blocks` (``counts`` default:
    :func:`invariant_counts` of the default shapes)."""
    return sum(row_blocks(rows, invariant_counts() if counts is None else tuple(counts)))


@functools.lru_cache(maxsize=4096)
def row_blocks(rows: int, counts: tuple[int, ...]) -> tuple[int, ...]:
    """Block sizes, each a batch-invariant row count among ``counts``, that hold ``rows`` rows: the
    fewest rows forwarded, counting each block as ``BLOCK_COST`` more rows (a small matrix multiply runs
    below a large one's speed), then the fewest blocks, the largest first: a function of ``rows`` and
    ``counts`` alone. A linear layer run block by block (:func:`blocked_linears`) then gives every row
    the bits it gets in any large batch, with little more padding than the counts force.

    Beyond ``PROBED_ROWS`` only a sample of counts is probed (``LARGE_ROWS``): where every sampled
    count passed, the large-batch kernel is taken as one regime and ``rows`` is one block (MKL on an
    AMD EPYC: every count from 12 on is invariant, so every step is one block, as in earlier
    releases); elsewhere only the counts that passed are used (an Intel Xeon's 100 rows: 56 + 44; its
    150: 208, every 16th count from 208 on having passed).
    Without any count (a GPU, no probe): ``rows`` as one block."""
    if not counts or (rows > PROBED_ROWS and set(LARGE_ROWS) <= set(counts)):
        return (rows,)
    if rows > ROW_BLOCK_LIMIT:  # whole blocks of the largest count, then the rest
        big = counts[-1]
        head = (rows - ROW_BLOCK_LIMIT + big - 1) // big
        return (big,) * head + row_blocks(rows - head * big, counts)
    # fewest blocks for every total up to one block that holds them all (a knapsack over the counts)
    limit = next((c for c in counts if c >= rows), rows + counts[-1])
    never = limit + 1
    fewest = [0] + [never] * limit
    for total in range(1, limit + 1):
        fewest[total] = min((fewest[total - c] + 1 for c in counts if c <= total), default=never)
    reachable = [t for t in range(rows, limit + 1) if fewest[t] < never]
    if not reachable:
        return (rows,)
    total = min(reachable, key=lambda t: (t + BLOCK_COST * fewest[t], fewest[t]))
    blocks = []
    while total:
        c = max(c for c in counts if c <= total and fewest[total - c] == fewest[total] - 1)
        blocks.append(c)
        total -= c
    return tuple(blocks)


@_per_thread_count
def invariant_key_columns(head_dim: int) -> int:
    """The fewest key columns from which this CPU's batched matrix multiply of queries by keys
    (``[M, D] x [D, L]``) gives every score the bits it gets at ``KEY_COLUMNS`` (96) columns, for the
    query row counts a prefill uses (probed once per head size). MKL on a 2-core AMD EPYC, AVX2 or
    AVX-512: 12 for ``D`` from 16 to 128, 13 for ``D`` = 8. A prefill pads its keys
    to at least this many (masked zeros), so that a short prompt batched alone gets the bits it
    gets beside long ones. Like :func:`invariant_counts`, measured per thread count."""
    import torch

    gen = torch.Generator().manual_seed(1)
    smallest = 1
    for m in (4, 8, 12, 16):
        q = torch.randn(2, m, head_dim, generator=gen)
        k = torch.randn(2, KEY_COLUMNS, head_dim, generator=gen)
        full = torch.bmm(q, k.transpose(1, 2))
        for n in range(KEY_COLUMNS - 1, 0, -1):
            if not torch.equal(torch.bmm(q, k[:, :n].transpose(1, 2)), full[..., :n]):
                smallest = max(smallest, n + 1)
                break
    return smallest


def forget_probed_kernels() -> None:
    """Forget what this process measured of its kernels (:func:`invariant_counts`, :func:`transposed_counts`,
    :func:`invariant_key_columns`): the next call measures again (a test that replaces the kernels)."""
    invariant_counts.cache_clear()
    transposed_counts.cache_clear()
    invariant_key_columns.cache_clear()


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


def blocked_head(head: Any, block: int = HEAD_BLOCK, out: Any = None,
                 rows: Callable[[int], tuple[int, ...]] | None = None, turned: frozenset[int] = frozenset()) -> Any:
    """``forward`` for a linear output head that multiplies one block of vocabulary columns at a time,
    writing into ``out`` (``[rows, vocab]``, reused across calls) when the rows fit, else into a new
    tensor. A reused buffer matters on the CPU: a fresh 50 MB tensor per step is fresh memory pages,
    and touching them the first time costs as much as a tenth of the step. With ``rows`` (a plan of
    row blocks, :func:`row_blocks`), the rows too are multiplied block by block (zero rows pad the last), a block
    whose row count is in ``turned`` by :func:`transposed` (a head without a bias)."""
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
                if m in turned and bias is None:
                    logits[r:r + m, start:stop] = transposed(flat[r:r + m], weight[start:stop])
                elif bias is None:
                    torch.mm(flat[r:r + m], w, out=logits[r:r + m, start:stop])
                else:
                    torch.addmm(bias[start:stop], flat[r:r + m], w, out=logits[r:r + m, start:stop])
                r += m
        return logits[:n].view(*hidden.shape[:-1], vocab)

    return forward


@contextlib.contextmanager
def blocked_output_head(model: Any, out: Any = None, rows: Callable[[int], tuple[int, ...]] | None = None,
                        turned: frozenset[int] = frozenset()) -> Iterator[None]:
    """Within the block, the model's linear output head runs block by block (same values, faster on
    the CPU), into ``out`` when given, its rows in the blocks ``rows`` plans, those of a count in ``turned``
    transposed (see :func:`blocked_head`).

    The head module stays in place, so hooks registered on it still see every output."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    plain = (isinstance(head, torch.nn.Linear) and type(head).forward is torch.nn.Linear.forward
             and "forward" not in vars(head) and head.weight.device.type == "cpu")
    if not plain:
        yield
        return
    head.forward = blocked_head(head, out=out, rows=rows, turned=turned)
    try:
        yield
    finally:
        del head.forward


def row_blocked(module: Any, rows: Callable[[int], tuple[int, ...]], turned: frozenset[int] = frozenset()) -> Any:
    """``forward`` for a linear layer (``torch.nn.Linear``, or GPT-2's ``Conv1D``, whose weight is
    ``[in, out]``) that multiplies its input rows in the blocks ``rows(n)`` plans, zero rows padding
    the last: each block is the matrix multiply the layer itself runs (``mm``, or ``addmm`` with a
    bias), at the block's row count, or :func:`transposed` where the count is in ``turned`` (a
    ``torch.nn.Linear`` without a bias). A plan of one plain block of exactly ``n`` rows is the layer's own
    forward, untouched."""
    import torch

    own = module.forward
    weight, bias = module.weight, module.bias
    w = weight.t() if isinstance(module, torch.nn.Linear) else weight
    turned = turned if isinstance(module, torch.nn.Linear) and bias is None else frozenset()

    def forward(x: Any) -> Any:
        n = x.numel() // x.shape[-1] if x.shape[-1] else 0
        plan = rows(n)
        if ((len(plan) == 1 and plan[0] == n and n not in turned)
                or (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))):
            return own(x)
        flat = x.reshape(n, x.shape[-1])
        total = sum(plan)
        if total > n:
            flat = torch.cat([flat, flat.new_zeros(total - n, flat.shape[1])])
        y = torch.empty((total, w.shape[1]), dtype=torch.result_type(flat, w), device=flat.device)
        r = 0
        for m in plan:
            if m in turned:
                y[r:r + m] = transposed(flat[r:r + m], weight)
            elif bias is None:
                torch.mm(flat[r:r + m], w, out=y[r:r + m])
            else:
                torch.addmm(bias, flat[r:r + m], w, out=y[r:r + m])
            r += m
        return y[:n].view(*x.shape[:-1], w.shape[1])

    return forward


@contextlib.contextmanager
def blocked_linears(model: Any, rows: Callable[[int], tuple[int, ...]], out: Any = None,
                    head_rows: Callable[[int], tuple[int, ...]] | None = None, turned: tuple[int, ...] = ()
                    ) -> Iterator[None]:
    """Within the block, every linear layer of ``model`` multiplies its rows (a step's rows, or a
    prefill's tokens) in the blocks ``rows`` plans, a block of a count in ``turned`` by :func:`transposed`
    (:func:`row_blocked`; the probe's choice, :func:`model_kernels`), and the output head also
    by vocabulary columns, into ``out`` when given, its rows in the blocks ``head_rows`` plans (default
    ``rows``; :func:`blocked_output_head`).

    So that a row's bits do not depend on how many rows it is multiplied with: each block's row
    count is one the CPU's kernel gives every row the same bits at (:func:`row_blocks`, probed), or
    the same fixed count for every block (the prefill, :mod:`dsgen.generation.prefill_step`). Only
    plain layers are blocked (a module with a ``forward`` of its own keeps it); hooks on the modules
    still see every call."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    turned = frozenset(turned)
    with blocked_output_head(model, out=out, rows=head_rows or rows, turned=turned):  # a plain CPU head: by columns too
        layers = [m for m in model.modules()
                  if "forward" not in vars(m) and getattr(m, "weight", None) is not None and m.weight.dim() == 2
                  and ((isinstance(m, torch.nn.Linear) and type(m).forward is torch.nn.Linear.forward)
                       or type(m).__name__ == "Conv1D")]
        for m in layers:
            m.forward = row_blocked(m, (head_rows or rows) if m is head else rows, turned)
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


__all__ = ["PROBED_ROWS", "LARGE_ROWS", "invariant_counts", "invariant_rows", "row_blocks", "invariant_key_columns",
           "forget_probed_kernels", "layer_shapes", "model_counts", "model_kernels", "transposed", "transposed_counts",
           "exact_softmax", "row_attention", "blocked_head", "blocked_output_head", "row_blocked", "blocked_linears",
           "invariant_forward", "ROW_ATTENTION", "ROW_ATTENTION_EXACT", "ATTENTION_NAMES", "HEAD_BLOCK"]
