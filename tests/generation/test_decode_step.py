"""The decode step is batch-invariant, so shared, forked and moved rows change no output.

What the decode loop relies on, checked where it holds: a row's logits are the same bits in any
batch, slot and row count; sharing rows gives byte-identical outputs with fewer rows forwarded;
the blocked output head and the row-wise attention compute what the model computes.
"""

import unittest.mock

import pytest
import torch

from dsgen.generation.batch import ActiveBatch, PromptBank
from dsgen.generation.decode_step import (blocked_head, blocked_output_head, invariant_forward, row_attention,
                                          row_blocked)
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.forward import cache_arg, returned_cache
from dsgen.generation.invariance import numerics
from dsgen.generation.kernels import PROBED_ROWS, invariant_rows
from dsgen.generation.sampling import SamplingConfig
from tests.conftest import build_tiny_lm
from tests.generation.test_decoding import QuoteBias, make_requests

PROMPTS = ['Say "', 'Tell me "', 'A longer prompt here "', 'Task: "x" then "', 'Q "']


def test_invariant_row_counts():
    from dsgen.generation.kernels import LARGE_ROWS, PROBED_ROWS, invariant_counts, row_blocks
    from dsgen.generation.invariance import mkl_code_path

    counts = invariant_counts()
    assert counts and counts[-1] == LARGE_ROWS[-1]  # the probe's full batch is invariant by definition
    padded = [invariant_rows(n) for n in range(1, 2 * LARGE_ROWS[-1])]
    assert padded == sorted(padded) and all(p >= n for n, p in enumerate(padded, 1))
    for n in range(1, 2 * LARGE_ROWS[-1]):  # every block a probed count (or, in a one-regime large batch, n itself)
        blocks = row_blocks(n, counts)
        assert sum(blocks) == invariant_rows(n) and all(b in counts or (blocks == (n,) and n > PROBED_ROWS) for b in blocks)
    # MKL's path on an AMD EPYC (AVX2 or AVX-512 alike), as measured; its Intel paths (an Intel CPU) have other counts
    if mkl_code_path() == "Intel(R) Architecture processors":
        assert padded[:14] == [4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 13, 14] and invariant_rows(5000) == 5000


def test_the_counts_belong_to_the_thread_count_they_were_measured_at():
    """MKL splits a multiply's rows between its threads, so the invariant counts differ by thread count (a 2-core
    AMD EPYC: every count from 4 on at one thread; 4, 8 and 12 on at two). A process that measured them at one
    count and then computes at another is given the other count's answer, each one true where it is used."""
    from dsgen.generation.kernels import LARGE_ROWS, forget_probed_kernels, invariant_counts, invariant_key_columns

    threads = torch.get_num_threads()
    gen = torch.Generator().manual_seed(5)
    w, x = torch.randn(96, 64, generator=gen), torch.randn(LARGE_ROWS[-1], 64, generator=gen)
    forget_probed_kernels()
    try:
        for n in (1, 2, 1, threads):  # each count measured after another one was
            torch.set_num_threads(n)
            counts = invariant_counts(((64, 96),))
            full = torch.nn.functional.linear(x, w)
            assert all(torch.equal(torch.nn.functional.linear(x[:m], w), full[:m]) for m in counts), n
            assert invariant_key_columns(16) >= 1
    finally:
        torch.set_num_threads(threads)


def test_a_step_is_cut_into_invariant_blocks_where_the_large_regime_is_not_invariant():
    """Beyond the counts probed one by one only a sample is probed: where every sampled count passed (an AMD
    EPYC) a step is one block; where some fail (an Intel Xeon with AVX-512: 16-56 and from 193 on, so every
    sampled count from 208), a step is cut into counts that passed, with as little padding as they allow
    (counting a block as ``BLOCK_COST`` rows), instead of padded to the next large one (100 rows were
    forwarded as 256), and pads to the next sampled count where that is cheaper than small blocks."""
    from dsgen.generation.kernels import BLOCK_COST, LARGE_ROWS, row_blocks

    assert set(range(208, 513, 16)) <= set(LARGE_ROWS)  # a step pads at most 15 rows on the Xeon's large kernel
    amd = (4, 8) + tuple(range(12, PROBED_ROWS + 1)) + LARGE_ROWS
    assert [row_blocks(n, amd) for n in (3, 5, 9, 13, 100, 600)] == [(4,), (8,), (12,), (13,), (100,), (600,)]
    intel = tuple(range(16, 57)) + tuple(c for c in LARGE_ROWS if c >= 193)
    assert row_blocks(5, intel) == (16,) and row_blocks(40, intel) == (40,) and row_blocks(100, intel) == (56, 44)
    assert row_blocks(150, intel) == (208,) and row_blocks(300, intel) == (304,)
    assert row_blocks(1000, intel) == (512, 496)
    for n in range(1, 1100):  # never dearer than cutting n into blocks of at most 56
        blocks = row_blocks(n, intel)
        cost = sum(blocks) + BLOCK_COST * len(blocks)
        assert all(b in intel for b in blocks) and n <= sum(blocks) and cost <= max(n, 16) + BLOCK_COST * -(-n // 56), n
    assert invariant_rows(100, intel) == 100 and row_blocks(7000, intel)[0] == 512  # no knapsack over 7000 rows


def test_a_step_in_several_blocks_gives_each_row_the_bits_of_one_block():
    """A step cut into blocks of invariant counts gives every row, the output head's included, the bits of the step
    in one block of an invariant count: the largest count the model's probe found that two others add up to (512 =
    256 + 256 on an AMD EPYC; 30 = 24 + 6 for a tiny model on an Intel CPU's AVX2 path), each block by the kernel
    the probe chose for its count (oneDNN's for every block, on every CPU kind met)."""
    from dsgen.generation.decode_step import blocked_linears
    from dsgen.generation.kernels import model_kernels

    model, tok = build_tiny_lm(seed=6)
    kernels = model_kernels(model)
    counts = kernels.counts
    n, a = next((n, a) for n in reversed(counts) for a in reversed(counts) if a < n and n - a in counts)
    ids = torch.randint(3, len(tok), (n, 1))
    with torch.inference_mode():
        with blocked_linears(model, lambda rows: (n,), kernels=kernels):
            whole = model(input_ids=ids, use_cache=False).logits
        with blocked_linears(model, lambda rows: (a, n - a) if rows == n else (rows,), kernels=kernels):
            cut = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(cut, whole)
    assert "forward" not in vars(model.model.layers[0].mlp.up_proj)  # restored


def test_blocks_run_transposed_give_the_bits_of_the_plain_kernel_wherever_the_probe_says():
    """The other kernel (the weight times the rows' transpose) at every small count where it gives a row the bits of
    the large batch (speed aside: ``timed=False``; an Intel Xeon's AVX-512 path: 2-56, an AMD EPYC's: 12-64), mixed
    with plain blocks in one step, gives every row, the output head's included, the bits of the step in one plain
    block; the probe runs a count that way only where it found that (and none where it found nothing: an Intel CPU's
    AVX2 path, where the rest has nothing to check). Where the model's layers run oneDNN's multiply instead
    (:func:`test_the_probe_runs_onednn_where_it_passes_every_count`), these are the fallback's."""
    from dsgen.generation.decode_step import blocked_linears
    from dsgen.generation.kernels import (ATEN, LAYER_SHAPES, Kernels, invariant_counts, layer_shapes, model_kernels,
                                          transposed_counts)

    model, tok = build_tiny_lm(seed=6)
    shapes = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(model))))
    plain, either = invariant_counts(shapes), transposed_counts(shapes, False)
    with unittest.mock.patch("dsgen.generation.kernels.onednn_counts",
                             lambda shapes, conv1d=False, packs=False: ()):  # the fallback
        counts, turned, library, _ = model_kernels(model)
    assert library == ATEN
    assert set(turned) <= set(either) and set(either) - set(plain) <= set(turned)  # the one kernel a count has
    assert set(counts) == set(plain) | set(turned)
    if not either:  # an Intel CPU's AVX2 path: every block runs the plain kernel, as checked above
        return
    n = max(plain)
    ids = torch.randint(3, len(tok), (n, 1))
    plan = []
    while sum(plan) < n:  # every count the other kernel passes, then plain blocks of one count, padded
        plan.append(either[len(plan) % len(either)] if sum(plan) < n // 2 else max(c for c in plain if c <= n))
    with torch.inference_mode():
        with blocked_linears(model, lambda rows: (n,)):
            whole = model(input_ids=ids, use_cache=False).logits
        with blocked_linears(model, lambda rows: tuple(plan) if rows == n else (rows,), kernels=Kernels((), either)):
            cut = model(input_ids=ids, use_cache=False).logits
    assert torch.equal(cut, whole), (plan, either)


def test_the_probe_runs_onednn_where_it_passes_every_count():
    """A model of float32 ``torch.nn.Linear`` layers runs oneDNN's multiply exactly where that gives a row the large
    batch's bits at every probed count from 2 on (every CPU kind met), whatever PyTorch's own does; GPT-2, whose
    ``Conv1D`` layers hold their weights transposed, where it does so in that layout too. The choice rests on bits
    alone, so two probes choose alike; a step of one row is padded to 2 rows there (unless one row passes too), any
    other is one block."""
    from dsgen.generation.kernels import (LARGE_ROWS, LAYER_SHAPES, ONEDNN, Kernels, conv1d_shapes,
                                          forget_probed_kernels, layer_shapes, model_kernels, onednn_counts,
                                          onednn_packs_alike, row_blocks)

    model, tok = build_tiny_lm(seed=6)
    shapes = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(model))))
    packs = onednn_packs_alike(shapes)
    found = onednn_counts(shapes, packs=packs)
    kernels = model_kernels(model)
    every = set(range(2, PROBED_ROWS + 1)) | set(LARGE_ROWS)
    assert (kernels.library == ONEDNN) == (every <= set(found))
    if kernels.library == ONEDNN:
        assert kernels.counts == found and kernels.transposed == ()
        # one row padded to two, but where a single row gets the large batch's bits too (packed weights on an Intel
        # CPU's AVX2 path)
        assert row_blocks(1, found) == ((1,) if 1 in found else (2,))
        assert kernels.packs == packs
        assert all(row_blocks(n, found) == (n,) for n in (2, 7, 64, 100, 300, 512))
    forget_probed_kernels()
    assert model_kernels(model) == kernels  # probed again: the same choice
    gpt2, _ = build_tiny_lm(seed=6, arch="gpt2")
    linear = tuple(sorted(set(LAYER_SHAPES) | set(layer_shapes(gpt2, conv1d=False))))
    packs = onednn_packs_alike(linear) and onednn_packs_alike(conv1d_shapes(gpt2), conv1d=True)
    both = (set(onednn_counts(linear, packs=packs)) & set(onednn_counts(conv1d_shapes(gpt2), conv1d=True, packs=packs)))
    assert conv1d_shapes(gpt2) and (model_kernels(gpt2).library == ONEDNN) == (every <= both)
    conv = gpt2.transformer.h[0].mlp.c_fc  # oneDNN on a Conv1D's own (transposed) weight: the layer's values
    x = torch.randn(2, 9, conv.weight.shape[0])
    with torch.inference_mode():
        for packs in (False, True):  # its weight plain, or packed ahead
            assert torch.allclose(row_blocked(conv, lambda n: (n,), Kernels((), (), ONEDNN, packs))(x), conv(x),
                                  atol=1e-5)


def test_a_packed_weight_is_kept_while_its_tensor_lives_unchanged():
    """:func:`~dsgen.generation.kernels.packed` packs a weight (or a view of one: a head's block of rows) once and
    hands the same copy back while the tensor lives with the same values; a weight changed in place or given a new
    storage is packed anew, and a freed one's copies go with it. Where this machine's probe lets the layers run packed
    weights (:func:`~dsgen.generation.kernels.onednn_packs_alike`), a row gets the plain weight's bits at every count
    the packed multiply is invariant at."""
    import gc

    from dsgen.generation import kernels
    from dsgen.generation.kernels import LARGE_ROWS, onednn, onednn_counts, onednn_packs_alike, packed

    if not kernels._onednn_runs():
        pytest.skip("this PyTorch build has no oneDNN")
    layer = torch.nn.Linear(48, 80, bias=False)
    with torch.inference_mode():
        first, block = packed(layer.weight), packed(layer.weight[16:48])
        assert packed(layer.weight) is first and packed(layer.weight[16:48]) is block and block is not first
    x = torch.randn(512, 48)
    with torch.no_grad():
        layer.weight.mul_(2)  # a new version: packed anew, with the new values
        assert packed(layer.weight) is not first
        assert torch.equal(onednn(x[:7], packed(layer.weight)), onednn(x[:7], layer.weight))
        again = packed(layer.weight)
        layer.weight.data = torch.randn(80, 48)  # a new storage (as a module's .to() makes): packed anew
        assert packed(layer.weight) is not again
        assert torch.equal(onednn(x[:7], packed(layer.weight)), onednn(x[:7], layer.weight))
        again = packed(layer.weight)
        kernels.forget_packed()  # what a write through .data needs
        assert packed(layer.weight) is not again
    kept = len(kernels._PACKED)
    del layer, first, block, again
    gc.collect()
    assert len(kernels._PACKED) == kept - 1  # nothing left of the freed weight
    shapes = ((48, 80), (80, 48))
    if onednn_packs_alike(shapes):
        w = torch.randn(80, 48)
        counts = set(onednn_counts(shapes, packs=True)) & set(onednn_counts(shapes))
        for n in sorted(counts & ({*range(2, 40), *LARGE_ROWS})):
            assert torch.equal(onednn(x[:n], kernels.pack(w)), onednn(x[:n], w)), n


@pytest.mark.parametrize("k,n", [(32, 64), (64, 32), (576, 1536)])
def test_linear_layers_give_every_row_the_same_bits_at_invariant_row_counts(k, n):
    """The property :func:`row_blocks` relies on, for the counts probed for a model with a layer of this shape: a
    row gets the same bits in a block of any of them, wherever it sits in the block (the bits of its block of the
    smallest count); if it fails on another CPU, sharing rows there is exact only up to float rounding."""
    from dsgen.generation.kernels import LAYER_SHAPES, invariant_counts, row_blocks

    torch.manual_seed(0)
    w, x = torch.randn(n, k), torch.randn(512, k)
    counts = invariant_counts(tuple(sorted({(k, n)} | set(LAYER_SHAPES))))
    assert counts
    first = counts[0]
    own = torch.cat([torch.nn.functional.linear(x[i:i + first], w) for i in range(0, 512 - first + 1, first)])
    own = torch.cat([own, torch.nn.functional.linear(x[512 - first:], w)[first - 512 % first:]])  # the last rows
    blocks = {b for r in (*range(1, 80), 100, 128, 200, 256, 300, 512) for b in row_blocks(r, counts)}
    for rows in sorted(blocks):
        for start in (0, 512 - rows):
            assert torch.equal(torch.nn.functional.linear(x[start:start + rows], w), own[start:start + rows]), rows


def _step_logits(model, tok, prompts, tokens):
    """Logits of one decode step for ``prompts`` fed ``tokens``, in one batch."""
    found = numerics(model)
    bank = PromptBank(model, tok, PROMPTS, numerics=found)
    batch = ActiveBatch(model, torch.device("cpu"), max_rows=len(prompts), max_columns=bank.width + 4,
                        first_column=bank.width, numerics=found)
    with torch.inference_mode():
        batch.admit(bank, prompts)
        batch.advance(torch.tensor(tokens))
        batch.advance(torch.tensor([5 + (t * 3) % 40 for t in tokens]))
    return batch.logits[:len(prompts)].clone()


@pytest.mark.parametrize("arch", ["llama", "gpt2", "mistral"])
def test_a_rows_logits_are_the_same_bits_in_any_batch_slot_and_thread_count(arch):
    model, tok = build_tiny_lm(seed=3, arch=arch)
    big = [PROMPTS[i % len(PROMPTS)] for i in range(37)]
    tokens = [5 + (i * 7) % 40 for i in range(37)]
    full = _step_logits(model, tok, big, tokens)
    for lo, hi in ((0, 1), (3, 5), (10, 23), (5, 37)):
        part = _step_logits(model, tok, big[lo:hi], tokens[lo:hi])
        assert torch.equal(part, full[lo:hi]), (lo, hi)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _step_logits(model, tok, big, tokens)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, full)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_row_wise_attention_computes_what_the_model_computes(arch):
    """A decode step under :func:`invariant_forward` against the model's own SDPA attention, and the
    blocked head against one matrix multiply (same bits)."""
    model, tok = build_tiny_lm(seed=4, arch=arch)
    ids = torch.randint(3, len(tok), (6, 9))
    mask = torch.ones_like(ids)
    mask[2, :4] = 0
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    with torch.inference_mode():
        out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True)
        additive = torch.zeros(mask.shape).masked_fill(mask == 0, float("-inf"))[:, None, None, :]
        plain = model(input_ids=ids[:, -1:], attention_mask=additive, position_ids=pos[:, -1:],
                      **cache_arg(model, returned_cache(out)), use_cache=False).logits
        out = model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos[:, :-1], use_cache=True)
        with invariant_forward(model), blocked_output_head(model):
            ours = model(input_ids=ids[:, -1:], attention_mask=additive, position_ids=pos[:, -1:],
                         **cache_arg(model, returned_cache(out)), use_cache=False).logits
    assert torch.allclose(ours, plain, atol=1e-5)
    assert model.config._attn_implementation == "sdpa" and "forward" not in vars(model.get_output_embeddings())
    head = torch.nn.Linear(16, 1000, bias=True)
    x = torch.randn(7, 3, 16)
    assert torch.equal(blocked_head(head, block=128)(x), head(x))


def test_grouped_query_attention_matches_repeated_heads():
    torch.manual_seed(1)
    q, k, v = torch.randn(5, 6, 1, 8), torch.randn(5, 2, 11, 8), torch.randn(5, 2, 11, 8)
    mask = torch.zeros(5, 1, 1, 11)
    mask[1, ..., :4] = float("-inf")
    out, _ = row_attention(None, q, k, v, mask, scaling=0.3)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1),
                                                                attn_mask=mask, scale=0.3)
    assert out.shape == (5, 1, 6, 8) and torch.allclose(out, expected.transpose(1, 2), atol=1e-6)


def test_prefill_shaped_attention_matches_sdpa_where_a_query_attends_and_stays_finite_where_none_does():
    torch.manual_seed(2)
    q, k, v = torch.randn(3, 4, 6, 8), torch.randn(3, 2, 6, 8), torch.randn(3, 2, 6, 8)
    mask = torch.ones(3, 1, 6, 6, dtype=torch.bool).tril()
    mask[1, :, :, :2] = False  # row 1 is left-padded by 2: its first 2 queries attend to nothing
    out, _ = row_attention(None, q, k, v, mask)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                                attn_mask=mask).transpose(1, 2)
    real = mask[:, 0].any(-1)  # [B, Q]: queries that attend to something
    assert torch.isfinite(out).all() and torch.allclose(out[real], expected[real], atol=1e-6)
    causal, _ = row_attention(None, q, k, v, None)
    assert torch.allclose(causal, row_attention(None, q, k, v, mask.new_ones(3, 1, 6, 6).tril())[0])


def test_decoding_gives_the_same_bytes_on_any_thread_count():
    """Prefill and decode steps: one thread (a Ray actor's share) and two give the same outputs, whichever count
    the process probed the model and its kernels at first (here one thread: a count invariant there, 5 rows on
    a 2-core AMD EPYC, is not at two)."""
    from dsgen.generation.kernels import forget_probed_kernels

    model, tok = build_tiny_lm(seed=12)
    sampling = SamplingConfig(max_new_tokens=10)
    reqs = make_requests(5, n=3)
    threads = torch.get_num_threads()
    forget_probed_kernels()
    runs = []
    with QuoteBias(model, tok, 2.0, triggers="aeiou"):
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            try:
                res = DebiasedDecoder(model, tok, sampling, max_rows=24).decode(reqs, seed=9)
            finally:
                torch.set_num_threads(threads)
            runs.append([[(o.tokens, o.logprobs) for o in outs] for outs in res])
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("max_rows,top_k", [(7, 5), (16, 5), (40, 0)])
def test_shared_rows_give_byte_identical_outputs_with_fewer_rows(tiny_lm, max_rows, top_k):
    """Sharing rows between groups (and forking them) against one row per group and prompt: the
    same tokens and the same log-probabilities, bit for bit, at a fraction of the rows."""
    sampling = SamplingConfig(max_new_tokens=12, top_k=top_k, top_p=0.9 if top_k else 1.0)
    reqs = make_requests(6, n=4)
    with QuoteBias(tiny_lm.model, tiny_lm.tokenizer, 2.0, triggers="aeiou"):
        shared = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=max_rows, spare_columns=3)
        unshared = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=max_rows, spare_columns=3,
                                   share_rows=False)
        a = shared.decode(reqs, seed=5)
        b = unshared.decode(reqs, seed=5)
    key = lambda res: [[(o.tokens, o.logprobs, o.accepted, o.text) for o in outs] for outs in res]  # noqa: E731
    assert key(a) == key(b)
    assert shared.stats["row_forks"] > 0 and unshared.stats["row_forks"] == 0
    assert shared.stats["unshared_rows"] == unshared.stats["unshared_rows"]
    # sharing never forwards more rows; it forwards fewer where a step of fewer rows is forwarded as fewer rows,
    # i.e. where the budget lies above the count from which every count is batch-invariant (as probed: 12 on an
    # AMD EPYC, 16 on an Intel Xeon with AVX-512); below it a step is padded to the same count either way
    # (none on an Intel CPU's AVX2 path for a tiny model: 4-6, 10-12, ... 28-30)
    found = numerics(tiny_lm.model)
    dense = min((c for c in found.counts if all(m in found.counts for m in range(c, PROBED_ROWS + 1))), default=None)
    assert shared.stats["forward_rows"] <= unshared.stats["forward_rows"]
    if dense is not None and max_rows > dense:
        assert shared.stats["forward_rows"] < unshared.stats["forward_rows"]


DINO_LIKE = [f'Task: Write two sentences that mean the same thing.\nSentence 1: "{s}"\nSentence 2: "'
             for s in ("A cat sleeps.", "Two dogs run in a park.", "A man plays a guitar.", "Rain.")]
OTHER = ['Task: Write two sentences that are on completely different topics.\nSentence 1: "A cat sleeps."\nSentence 2: "',
         'Short "']


def test_shared_prefixes_take_the_instruction_head_and_do_not_depend_on_order(tiny_lm):
    from dsgen.generation.batch import MIN_SHARED_PREFIX, shared_prefixes
    from dsgen.generation.forward import tokenize

    prompts = DINO_LIKE + OTHER
    ids = tokenize(tiny_lm.tokenizer, prompts)
    shared = shared_prefixes(ids)
    head = len(tokenize(tiny_lm.tokenizer, ['Task: Write two sentences that mean the same thing.\nSentence 1: "'])[0])
    assert shared[:4] == [head] * 4
    assert shared[-1] == 0  # nothing in common with any other prompt
    assert all(s == 0 or MIN_SHARED_PREFIX <= s < len(i) for s, i in zip(shared, ids))
    for perm in ([5, 4, 3, 2, 1, 0], [2, 0, 5, 1, 4, 3]):
        assert shared_prefixes([ids[i] for i in perm]) == [shared[i] for i in perm]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_prompt_bank_is_the_same_bits_with_shared_prefixes_and_in_any_subset(arch):
    model, tok = build_tiny_lm(seed=5, arch=arch)
    prompts = DINO_LIKE + OTHER
    with torch.inference_mode():
        found = numerics(model)
        shared = PromptBank(model, tok, prompts, batch_size=4, numerics=found)
        whole = PromptBank(model, tok, prompts, batch_size=4, share_prefixes=False, numerics=found)
        subset = PromptBank(model, tok, prompts[1:3] + prompts[4:5], batch_size=32, numerics=found)
    assert shared.forward_tokens < whole.forward_tokens
    assert torch.equal(shared.logits, whole.logits)
    for a, b in zip(shared.keys + shared.values, whole.keys + whole.values):
        assert torch.equal(a, b)
    rows = [shared.index[p] for p in subset.index]
    assert torch.equal(subset.logits, shared.logits[rows])
    for a, b in zip(subset.keys + subset.values, shared.keys + shared.values):
        w = subset.width
        assert torch.equal(a, b[rows, :, b.shape[2] - w:])
        assert not b[rows, :, :b.shape[2] - w].any()  # a shorter bank is the same right-aligned


def test_extending_rows_after_their_past_computes_what_the_whole_forward_computes(tiny_lm):
    from dsgen.generation.forward import extend_rows, forward_last, pad_id, tokenize

    model, tok = tiny_lm.model, tiny_lm.tokenizer
    ids = tokenize(tok, DINO_LIKE[:3] + OTHER[1:])
    split = [9, 5, 12, 0]
    with torch.inference_mode():
        found = numerics(model)
        reference = forward_last(model, ids, pad_id(tok)).logits
        whole = extend_rows(model, ids, pad_id(tok), numerics=found)
        past = extend_rows(model, [s[:p] for s, p in zip(ids, split) if p], pad_id(tok), numerics=found)
        wp = max(split)
        pk, pv = [], []
        for k, v in zip(past.keys, past.values):
            kb, vb = k.new_zeros((len(ids), k.shape[1], wp, k.shape[3])), v.new_zeros((len(ids), v.shape[1], wp, v.shape[3]))
            for r, (row, p) in enumerate(zip([0, 1, 2, None], split)):
                if p:
                    kb[r, :, wp - p:], vb[r, :, wp - p:] = k[row, :, :p], v[row, :, :p]
            pk.append(kb)
            pv.append(vb)
        extended = extend_rows(model, [s[p:] for s, p in zip(ids, split)], pad_id(tok), pk, pv, split, numerics=found)
    assert torch.allclose(whole.logits, reference, rtol=1e-5, atol=1e-5)
    assert torch.equal(extended.logits, whole.logits)
    for layer in range(len(whole.keys)):
        for r, (s, p) in enumerate(zip(ids, split)):
            assert torch.equal(extended.keys[layer][r, :, :len(s) - p], whole.keys[layer][r, :, p:len(s)])
