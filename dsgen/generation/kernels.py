"""What this CPU's matrix multiplies give a row: the row counts and kernels at which its bits do not depend on
the batch.

A decode step (:mod:`dsgen.generation.decode_step`) and a prefill (:mod:`dsgen.generation.prefill_step`) are exact
only where every linear layer gives a row the bits it gets in any large batch. Whether it does depends on the CPU's
kernels, which choose their blocking by the row count: MKL on a 2-core AMD EPYC gives a row the bits of a 512-row
batch at 4, 8 and every count from 12 on; on an Intel Xeon's AVX-512 path at 16-56 and from 193 rows on (its middle
kernel, 57-192 rows, rounds otherwise); on an Intel CPU's AVX2 path at 48 on for SmolLM2's shapes. So they are
measured here, on the CPU that runs, once per process, shape set and thread count (:func:`invariant_counts`), and a
step's rows are cut into blocks of those counts with as little padding as they allow (:func:`row_blocks`).

A block's product can also be computed as the weight times the rows' transpose (:func:`transposed`), which MKL runs
with another kernel: on the Xeon's path that one gives a row the large batch's bits at every count from 2 to 56, in
0.4-0.8 of the plain kernel's time, so the short last steps of each item are neither padded to 16 rows nor run on the
slow small kernel there. :func:`transposed_counts` probes it against the same reference and :func:`model_kernels`
says which counts a model's blocks run which way; either kernel gives a row the same bits, so the choice (where both
pass, by a timing) changes speed only. Where a key width matters (a prefill's short prompts):
:func:`invariant_key_columns`.

oneDNN's matrix multiply (:func:`onednn`, PyTorch's mkldnn linear) gives a row the bits of its own 512-row batch at
every count from 2 on, on every CPU kind met (an AMD EPYC's AVX-512 and AVX2, an Intel Xeon's AVX-512 and an Intel
CPU's AVX2 paths), where MKL has them at some counts only; so where :func:`onednn_counts` finds that, a model's
layers run it for every block (:func:`model_kernels`; GPT-2's ``Conv1D`` ones too, probed in their own weight layout),
and a step is one block of its own rows (a single row padded to two, where it does not pass too). Its bits are not
MKL's: which library runs is decided by the probe's bits alone, never by a timing, so every process on a machine
decides alike. Its weights are packed once into oneDNN's own blocked layout (:func:`packed`, a second copy kept
while the model lives) rather than reordered by oneDNN on every multiply, where the probe finds that gives the plain
weights' bits (:func:`onednn_packs_alike`: every kind met); the packed multiply is the one probed count by count.

Measured, not written down: another BLAS or CPU may choose its kernels elsewhere (results/benchmarks.md has the maps).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

# vocabulary columns per block of the output head (a 3.5 MB block for SmolLM2). 1536, not 2048: on an Intel CPU's AVX2
# path MKL gives the last 8 columns of a 1024- or 2048-column product other bits on one thread than on two (MKL splits
# the columns between its threads); at 1536 every CPU kind met gives one and two threads the same bits, and on AMD
# paths and an AVX-512 Xeon's the bits of 2048-column blocks (each logit is the same dot product)
HEAD_BLOCK = 1536
# row_blocks: a block costs as much as this many more rows: a 16-56-row multiply on an AVX-512 Xeon's MKL path takes
# about the time of 36 more rows of a large one (12 on an AMD EPYC, 5 on an Intel CPU's AVX2 path; results/benchmarks.md)
BLOCK_COST = 32
ROW_BLOCK_LIMIT = 4096  # row_blocks: steps beyond this many rows are cut into blocks of at most LARGE_ROWS[-1]

PROBED_ROWS = 64  # every row count up to this is probed
# and these beyond it (a decode step's rows at batch 512): every 16th, so that a step pads at most 15 rows where only
# the large kernel is invariant (an AVX-512 Xeon's MKL path: from 193 rows on), and two odd counts
LARGE_ROWS = tuple(sorted({*range(80, 513, 16), 129, 257}))
KEY_COLUMNS = 96  # key widths below this are probed (a prompt's 18-token instruction head and its input)
LAYER_SHAPES = ((576, 1536), (1536, 576), (64, 192))  # (in, out) probed for any model: SmolLM2's MLP, a head's
TRANSPOSED_SHARE = 0.8  # transposed_counts: a count both kernels pass runs transposed if it takes at most this share


def _per_thread_count(measure: Callable[..., Any]) -> Callable[..., Any]:
    """Remember what ``measure`` (a probe of this CPU's kernels) answers per argument and thread count: a
    kernel's bits can depend on how many threads split its work, so an answer found at one thread count is
    never given at another. ``cache_clear`` forgets every answer."""
    @functools.lru_cache(maxsize=None)
    def at(threads: int, *args: Any, **kwargs: Any) -> Any:
        return measure(*args, **kwargs)

    @functools.wraps(measure)
    def measured(*args: Any, **kwargs: Any) -> Any:
        import torch

        return at(torch.get_num_threads(), *args, **kwargs)

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
    return _passing(set(range(1, PROBED_ROWS + 1)) | set(LARGE_ROWS), layers, fulls, torch.nn.functional.linear)


def _passing(counts: set[int], layers: list[tuple[Any, Any]], fulls: list[Any],
             multiply: Callable[[Any, Any], Any]) -> tuple[int, ...]:
    """Those of ``counts`` at which ``multiply`` (rows, weight) gives the rows at both ends of every layer's reference
    batch the reference's bits (:func:`_reference`)."""
    import torch

    reference = LARGE_ROWS[-1]
    for (w, x), full in zip(layers, fulls):
        counts = {m for m in counts if all(torch.equal(multiply(x[s:s + m], w), full[s:s + m])
                                           for s in (0, reference - m))}
    return tuple(sorted(counts))


def _reference(shapes: tuple[tuple[int, int], ...], multiply: Callable[[Any, Any], Any] | None = None
               ) -> tuple[list[tuple[Any, Any]], list[Any]] | None:
    """Seeded ``(weight, rows)`` per shape and the rows' products by ``multiply`` (default: PyTorch's own linear) in
    the probes' reference batch: one block of ``LARGE_ROWS[-1]`` rows, else blocks of ``SMALL_BLOCK``, whichever
    gives a row the same bits wherever it sits (:func:`invariant_counts`); None where neither does."""
    import torch

    multiply = multiply or torch.nn.functional.linear
    gen = torch.Generator().manual_seed(0)
    reference = LARGE_ROWS[-1]
    layers = [(torch.randn(n, k, generator=gen), torch.randn(reference, k, generator=gen)) for k, n in shapes]
    for block in (reference, SMALL_BLOCK):  # the reference: one block, else blocks of SMALL_BLOCK rows
        fulls = [_in_blocks(x, w, block, multiply) for w, x in layers]
        # a row whose bits depend on where it sits gets other bits than a neighbour somewhere: the rows rolled by one
        if all(torch.equal(_in_blocks(torch.roll(x, 1, 0), w, block, multiply), torch.roll(full, 1, 0))
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
    found = _reference(shapes)
    if found is None:
        return ()
    layers, fulls = found
    counts = set(_passing(set(range(1, PROBED_ROWS + 1)), layers, fulls, transposed))
    both = sorted(counts & set(invariant_counts(shapes)))
    if timed and both and not _faster_transposed(layers, both[len(both) // 4::len(both) // 3 + 1][:3]):
        counts -= set(both)
    return tuple(sorted(counts))


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


def _in_blocks(x: Any, w: Any, block: int, multiply: Callable[[Any, Any], Any]) -> Any:
    """``x`` times ``w`` (a linear layer's) by ``multiply``, its rows multiplied ``block`` at a time."""
    import torch

    return torch.cat([multiply(x[i:i + block], w) for i in range(0, x.shape[0], block)])


def is_conv1d(module: Any) -> bool:
    """Whether ``module`` is GPT-2's ``Conv1D``: a linear layer whose weight is held as ``[in, out]``, the transpose of
    a ``torch.nn.Linear``'s."""
    weight = getattr(module, "weight", None)
    return type(module).__name__ == "Conv1D" and weight is not None and weight.dim() == 2


def conv1d_shapes(model: Any) -> tuple[tuple[int, int], ...]:
    """(in, out) of every distinct ``Conv1D`` layer of ``model`` (:func:`is_conv1d`)."""
    return tuple(sorted({(int(m.weight.shape[0]), int(m.weight.shape[1])) for m in model.modules() if is_conv1d(m)}))


def layer_shapes(model: Any, conv1d: bool = True) -> tuple[tuple[int, int], ...]:
    """(in, out) of every distinct linear layer of ``model`` (GPT-2's ``Conv1D`` ones too, unless not ``conv1d``; and
    of the output head's blocks)."""
    import torch

    shapes = set(conv1d_shapes(model) if conv1d else ())
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            shapes.add((int(module.weight.shape[1]), int(module.weight.shape[0])))
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        vocab, hidden = (int(x) for x in head.weight.shape)
        shapes.discard((hidden, vocab))
        shapes.add((hidden, min(vocab, HEAD_BLOCK)))
        if vocab > HEAD_BLOCK and vocab % HEAD_BLOCK:  # the last, narrower block (GPT-2's 50,257: 1,105 columns)
            shapes.add((hidden, vocab % HEAD_BLOCK))
    return tuple(sorted(shapes))


ONEDNN = "onednn"  # a model's linear layers run by oneDNN's matrix multiply (:func:`onednn`)
ATEN = "aten"  # ... by PyTorch's own (MKL on x86 builds), some counts transposed (:func:`transposed`)


def onednn(x: Any, w: Any, bias: Any = None) -> Any:
    """``x`` times the transpose of ``w`` (a linear layer's ``[out, in]`` float32 weight), plus ``bias``, by oneDNN's
    matrix multiply (PyTorch's mkldnn linear, the op its compiler calls) instead of the BLAS one PyTorch's own linear
    calls. On every CPU kind met it gives a row the bits of a 512-row batch at every row count from 2 on (one row takes
    another kernel), where MKL has them at some counts only, and at PyTorch's speed or faster (results/benchmarks.md)."""
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, w, bias, "none", [], "")


def onednn_conv1d(x: Any, w: Any, bias: Any = None) -> Any:
    """:func:`onednn` with the weight held as GPT-2's ``Conv1D`` holds it (``w``, a ``[out, in]`` weight, copied to
    ``[in, out]`` and passed as that copy's transposed view): the layout whose bits :func:`onednn_counts` probes for
    such layers, which run ``onednn(x, weight.t(), bias)`` on their own weight, uncopied."""
    return onednn(x, w.t().contiguous().t(), bias)


PACK_ROWS = LARGE_ROWS[-1]  # the batch oneDNN is told to expect when it lays a weight out ahead (:func:`pack`)
# :func:`packed`'s copies: tensor -> (its storage, weakly; its version; {view: packed}), a torch WeakIdKeyDictionary
_PACKED: Any = None


def pack(w: Any) -> Any:
    """``w`` (a linear layer's ``[out, in]`` float32 weight, or a view of one) laid out in oneDNN's own blocked format,
    for :func:`onednn`, which otherwise reorders a plain weight on every call: 3-20% of a multiply of SmolLM2's
    shapes at 145 rows on an emulated Xeon's path (results/benchmarks.md). A row gets the plain weight's bits at every
    count from 2 on, on every CPU kind met; where a machine's probe finds otherwise it multiplies the plain weight
    (:func:`onednn_packs_alike`)."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS)


def packed(w: Any) -> Any:
    """:func:`pack` of ``w``, done once and kept while the tensor ``w`` views (a model's parameter) lives with the same
    values, one copy per view (a head's blocks of rows, a ``Conv1D``'s transpose). The tensor's storage and version
    counter stamp the copies: an in-place change, ``param.data = ...`` or a module's ``.to()`` / ``.half()`` packs
    anew (a weak reference to the storage: a new one never passes for it). A write through ``param.data``
    bumps another counter and is not seen: :func:`forget_packed` after one. A tensor made in inference mode has no
    version counter: it is packed on every call."""
    global _PACKED
    root = w if w._base is None else w._base
    try:
        version = root._version
    except RuntimeError:
        return pack(w)
    from torch.multiprocessing.reductions import StorageWeakRef

    storage = root.untyped_storage()
    if _PACKED is None:
        from torch.utils.weak import WeakIdKeyDictionary

        _PACKED = WeakIdKeyDictionary()
    entry = _PACKED.get(root)
    if entry is None or entry[0].expired() or entry[0].cdata != storage._cdata or entry[1] != version:
        entry = _PACKED[root] = (StorageWeakRef(storage), version, {})
    view = (w.storage_offset(), tuple(w.shape), tuple(w.stride()))
    if view not in entry[2]:
        entry[2][view] = pack(w)
    return entry[2][view]


def forget_packed() -> None:
    """Drop every weight :func:`packed` keeps (after writing a model's weights through ``param.data``)."""
    global _PACKED
    _PACKED = None


def _packed_multiply(conv1d: bool) -> Callable[..., Any]:
    """The probes' :func:`onednn` with each weight packed once (:func:`pack`) from the layout a layer holds it in (a
    ``torch.nn.Linear``'s, or a ``Conv1D``'s), as a model's layers run it (:func:`packed`)."""
    kept: dict[int, tuple[Any, Any]] = {}

    def multiply(x: Any, w: Any, bias: Any = None) -> Any:
        if id(w) not in kept:  # the weight itself kept too, so that its id is not reused
            kept[id(w)] = (w, pack(w.t().contiguous().t() if conv1d else w))
        return onednn(x, kept[id(w)][1], bias)

    return multiply


@_per_thread_count
def onednn_packs_alike(shapes: tuple[tuple[int, int], ...] = LAYER_SHAPES, conv1d: bool = False) -> bool:
    """Whether :func:`onednn` by a packed weight (:func:`pack`) gives the probes' reference batches (:func:`_reference`)
    the bits of the plain weight, for layers of these shapes (held as a ``Conv1D`` holds them, with ``conv1d``): true
    on every CPU kind met. Where it is, and the packed multiply is invariant (:func:`onednn_counts`), a row gets the
    bits the plain weight gives it in a large batch, so packing changes no output."""
    import torch

    try:
        plain = _reference(shapes, onednn_conv1d if conv1d else onednn)
        ahead = _reference(shapes, _packed_multiply(conv1d))
    except (AttributeError, RuntimeError, NotImplementedError):  # a build without the packing op
        return False
    return (plain is not None and ahead is not None
            and all(torch.equal(a, b) for a, b in zip(plain[1], ahead[1])))


def _onednn_runs() -> bool:
    """Whether this PyTorch build runs :func:`onednn` on the CPU (built with oneDNN, the op present)."""
    import torch

    try:
        return bool(torch.backends.mkldnn.is_available()) and onednn(torch.ones(2, 3), torch.ones(4, 3)).shape == (2, 4)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


@_per_thread_count
def onednn_counts(shapes: tuple[tuple[int, int], ...] = LAYER_SHAPES, conv1d: bool = False,
                  packs: bool = False) -> tuple[int, ...]:
    """The row counts (every count up to ``PROBED_ROWS`` and ``LARGE_ROWS``) at which :func:`onednn` gives every row
    the bits of its own reference batch (as :func:`invariant_counts` for PyTorch's linear, whose bits it does not
    share), with the weights held as a ``torch.nn.Linear`` holds them, or (``conv1d``) as GPT-2's ``Conv1D`` does
    (:func:`onednn_conv1d`), each plain or (``packs``) packed once ahead (:func:`pack`), as the layers run it where
    :func:`onednn_packs_alike`: every count but 1 on every CPU kind met, any way (packed on an Intel CPU's AVX2 path,
    1 too); none where the build has no oneDNN."""
    if not _onednn_runs():
        return ()
    multiply = _packed_multiply(conv1d) if packs else onednn_conv1d if conv1d else onednn
    found = _reference(shapes, multiply)
    if found is None:
        return ()
    layers, fulls = found
    return _passing(set(range(1, PROBED_ROWS + 1)) | set(LARGE_ROWS), layers, fulls, multiply)


class Kernels(NamedTuple):
    """What a model's linear layers run: the row counts at which every layer gives a row the bits of a large batch
    (a step's rows are cut into blocks of them, :func:`row_blocks`), the library (``ATEN``: PyTorch's own linear, or
    ``ONEDNN``: :func:`onednn` for every block), with ``ATEN`` the counts whose blocks run :func:`transposed`, and with
    ``ONEDNN`` whether its weights are packed ahead (:func:`packed`; the plain weights' bits,
    :func:`onednn_packs_alike`)."""

    counts: tuple[int, ...]
    transposed: tuple[int, ...] = ()
    library: str = ATEN
    packs: bool = False

    def onednn_weight(self, w: Any) -> Any:
        """``w`` (a linear layer's ``[out, in]`` weight, or a view of one) as :func:`onednn` multiplies by it here."""
        return packed(w) if self.packs else w

    def own(self, rows: int) -> bool:
        """Whether a block of ``rows`` rows runs the layer's own multiply (PyTorch's, not transposed)."""
        return self.library == ATEN and rows not in self.transposed


def model_kernels(model: Any, packs: bool | None = None) -> Kernels:
    """The :class:`Kernels` for ``model`` at the current thread count, probed on shapes of its linear layers (and the
    default shapes, so that a tiny model's steps are cut as a real one's). oneDNN (:func:`onednn_counts`) where it
    gives a row the large batch's bits at every probed count from 2 on, the model's layers being float32
    (``torch.nn.Linear`` ones, and GPT-2's ``Conv1D`` ones probed in their own layout), its weights packed ahead where
    that gives the plain weights' bits (:func:`onednn_packs_alike`; ``packs=False``: plain, as probed so); else
    PyTorch's own linear at
    the counts it passes (:func:`invariant_counts`, all shapes against one kind of reference; empty where none does),
    those where the transposed product is invariant and faster, or alone invariant, run that way
    (:func:`transposed_counts`; only where every layer is a ``torch.nn.Linear`` without a bias). The choice rests on
    the probe's bits alone, never on a timing, so every process on the machine makes the same one (the two libraries
    give a row other bits)."""
    import torch

    shapes = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(model))))
    layers = [m for m in model.modules() if (isinstance(m, torch.nn.Linear) and m.weight.dim() == 2) or is_conv1d(m)]
    if all(m.weight.dtype == torch.float32 for m in layers):
        every = set(range(2, PROBED_ROWS + 1)) | set(LARGE_ROWS)
        # each layer in the layout it holds its weight in: GPT-2's projections as Conv1D ones, the rest as Linear ones
        linear, conv = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(model, conv1d=False)))), conv1d_shapes(model)
        if packs is None:
            packs = onednn_packs_alike(linear) and (not conv or onednn_packs_alike(conv, conv1d=True))
        found = set(onednn_counts(linear, packs=packs))
        if conv:
            found &= set(onednn_counts(conv, conv1d=True, packs=packs))
        if every <= found:
            return Kernels(tuple(sorted(found)), (), ONEDNN, packs)
    counts = invariant_counts(shapes)
    unbiased = all(isinstance(m, torch.nn.Linear) and m.bias is None for m in layers)
    turned = transposed_counts(shapes) if unbiased and counts else ()
    return Kernels(tuple(sorted(set(counts) | set(turned))), turned, ATEN)


def model_counts(model: Any) -> tuple[int, ...]:
    """The row counts at which every linear layer of ``model`` gives every row the bits of a large batch, with the
    kernel :func:`model_kernels` picks."""
    return model_kernels(model).counts


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
    ``counts`` alone. A linear layer run block by block (:func:`~dsgen.generation.decode_step.blocked_linears`)
    then gives every row the bits it gets in any large batch, with little more padding than the counts force.

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
    onednn_counts.cache_clear()
    onednn_packs_alike.cache_clear()
    invariant_key_columns.cache_clear()


__all__ = ["PROBED_ROWS", "LARGE_ROWS", "LAYER_SHAPES", "HEAD_BLOCK", "BLOCK_COST", "ROW_BLOCK_LIMIT", "ATEN", "ONEDNN",
           "Kernels", "invariant_counts", "transposed", "transposed_counts", "onednn", "onednn_conv1d", "onednn_counts",
           "pack", "packed", "forget_packed", "onednn_packs_alike", "PACK_ROWS",
           "is_conv1d", "conv1d_shapes", "layer_shapes",
           "model_kernels", "model_counts", "invariant_rows", "row_blocks", "invariant_key_columns",
           "forget_probed_kernels"]
