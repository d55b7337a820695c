"""The exact prefill, the judge and the decoder on a simulated CPU whose matrix multiply rounds by row count.

MKL on an Intel Xeon with AVX-512 (no bf16) gives a linear layer's row the bits it gets in a large batch only
at 16-56 rows and at 256, 257, 384 and 512 of the counts dsgen probes; no environment variable makes an AMD
machine do that. :class:`IntelLikeGemm` makes this machine do it: at any other row count every matrix
multiply (``F.linear``, ``mm``, ``addmm``, one matrix of a ``bmm``) sums its inner dimension in two parts split
where the row count says (a quarter, a half or three quarters in: kernels with other blockings would), so a
row's bits depend on how many rows it is multiplied with. Under
it, the plain batched forward (the judge's earlier path, and the prefill's earlier layout) gives a prompt
other bits in another batch, while the exact prefill, the judge and the decoder's shared rows stay exact.
"""

import contextlib
import dataclasses
import unittest.mock

import pytest
import torch

from dsgen.generation import kernels
from dsgen.generation.batch import PromptBank
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.forward import extend_rows, forward_last, pad_id, returned_cache, tokenize
from dsgen.generation.invariance import probe
from dsgen.generation.prefill_step import HEAD_ROWS, PREFILL_ROWS, QUERY_BLOCK, fixed_blocks, head_rows, prefill_rows
from dsgen.generation.probed import Numerics, assume
from dsgen.generation.sampling import SamplingConfig
from dsgen.models import LoadedLM
from tests.conftest import build_tiny_lm
from tests.generation.test_decode_step import DINO_LIKE, OTHER
from tests.generation.test_decoding import QuoteBias, make_requests

INTEL_COUNTS = frozenset(range(16, 57)) | {256, 257, 384, 512}


class IntelLikeGemm:
    """Within the block, torch's matrix multiplies round as a CPU whose kernel depends on the row count:
    outside ``INTEL_COUNTS`` the inner dimension is summed in two parts split where the row count says."""

    def __init__(self, monkeypatch):
        self.mp = monkeypatch
        self.calls = {"split": 0, "own": 0}

    def _split(self, rows, inner):
        """Where to split the inner dimension at this row count (0: the machine's own kernel)."""
        split = 0 if rows in INTEL_COUNTS or inner < 4 else inner * (1 + rows % 3) // 4
        self.calls["split" if split else "own"] += 1
        return split

    def __enter__(self):
        f, mm, addmm, bmm = torch.nn.functional.linear, torch.mm, torch.addmm, torch.bmm

        def linear(x, w, b=None):
            h = self._split(x.numel() // x.shape[-1], x.shape[-1])
            if not h:
                return f(x, w, b)
            y = f(x[..., :h], w[:, :h]) + f(x[..., h:], w[:, h:])
            return y if b is None else y + b

        def parts(a, b, op, h):
            return op(a[..., :h], b[..., :h, :]) + op(a[..., h:], b[..., h:, :])

        def mm_(a, b, *, out=None):
            h = self._split(a.shape[0], a.shape[1])
            y = parts(a, b, mm, h) if h else mm(a, b)
            return y if out is None else out.copy_(y)

        def addmm_(bias, a, b, *, out=None):
            h = self._split(a.shape[0], a.shape[1])
            y = parts(a, b, mm, h) + bias if h else addmm(bias, a, b)
            return y if out is None else out.copy_(y)

        def bmm_(a, b, *, out=None):
            h = self._split(a.shape[1], a.shape[2])
            y = parts(a, b, bmm, h) if h else bmm(a, b)
            return y if out is None else out.copy_(y)

        self.mp.setattr(torch.nn.functional, "linear", linear)
        self.mp.setattr(torch, "mm", mm_)
        self.mp.setattr(torch, "addmm", addmm_)
        self.mp.setattr(torch, "bmm", bmm_)
        self.mp.setattr(kernels, "onednn_counts", without_onednn)  # the simulated CPU's layers run PyTorch's linear
        kernels.forget_probed_kernels()
        return self

    def __exit__(self, *exc):
        self.mp.undo()
        kernels.forget_probed_kernels()


def without_onednn(shapes=kernels.LAYER_SHAPES, conv1d=False, packs=False):
    """:func:`~dsgen.generation.kernels.onednn_counts` on a CPU where oneDNN's multiply is invariant at no count, so
    that a model's layers run PyTorch's own linear (the fallback the simulation rounds)."""
    return ()


without_onednn.cache_clear = lambda: None  # as the probe's (kernels.forget_probed_kernels)


def simulated_here() -> None:
    """The simulation rounds on top of this machine's own kernels, so it models the Xeon only where those give the
    tiny models' rows the bits of a large batch at the Xeon's counts (MKL on an AMD EPYC, or on the Xeon itself); an
    Intel CPU's AVX2 path does not (a tiny model's rows get those bits only at 4-6, 10-12, ... 28-30 rows there)."""
    with unittest.mock.patch.object(kernels, "onednn_counts", without_onednn):
        own = set(kernels.model_counts(build_tiny_lm(seed=11)[0])) & set(
            kernels.model_counts(build_tiny_lm(seed=11, arch="gpt2")[0]))
    if not INTEL_COUNTS <= own:
        pytest.skip(f"this machine's own kernels give a tiny model's rows the same bits at {sorted(own)} rows, not at "
                    "every count of the Xeon's: the simulation on top of them is not the Xeon")


@pytest.fixture
def intel(monkeypatch):
    simulated_here()
    with IntelLikeGemm(monkeypatch) as sim:
        yield sim


def test_the_simulation_gives_the_counts_the_xeon_gave_and_breaks_the_plain_batched_forward(monkeypatch):
    """Under the simulation the probe finds the Xeon's counts (those of them this machine's own kernels pass for
    the default shapes: all on an AMD EPYC), and the plain left-padded forward (the judge's earlier path; the
    prefill's earlier layout multiplied ``rows x tokens`` rows too) gives a prompt other bits beside others than
    alone: the failure CI saw on the Xeon."""
    own = kernels.invariant_counts()
    with IntelLikeGemm(monkeypatch) as intel:
        counts = kernels.invariant_counts()
        assert set(counts) == INTEL_COUNTS & set(own) and {56, 256, 512} <= set(counts)
        assert not {1, 4, 8, 12, 57, 64, 96, 128, 192} & set(counts)
        model, tok = build_tiny_lm(seed=11)
        ids = tokenize(tok, DINO_LIKE + OTHER)
        with torch.inference_mode():
            alone = forward_last(model, ids[1:2], pad_id(tok)).logits[0]
            batched = forward_last(model, ids, pad_id(tok)).logits[1]
        assert torch.allclose(alone, batched, atol=1e-4) and not torch.equal(alone, batched)
        assert intel.calls["split"] > 0


@pytest.mark.parametrize("arch", ["llama", "gpt2", "mistral"])
def test_the_exact_prefill_is_the_same_bits_in_any_batch_and_after_a_cached_prefix(intel, arch):
    model, tok = build_tiny_lm(seed=12, arch=arch, **({"sliding_window": 24} if arch == "mistral" else {}))
    prompts = DINO_LIKE + OTHER + ["x" * 70 + ' "']  # one prompt of more than one row block's worth of queries
    with torch.inference_mode():
        for attention in ("softmax", "exact-sum"):
            num = Numerics(attention, kernels.Kernels(tuple(sorted(INTEL_COUNTS))), True, True, "simulated")
            shared = PromptBank(model, tok, prompts, batch_size=3, share_prefixes=True, numerics=num)
            whole = PromptBank(model, tok, prompts, batch_size=7, share_prefixes=False, numerics=num)
            part = PromptBank(model, tok, prompts[1:3] + prompts[5:], batch_size=32, numerics=num)
            assert shared.forward_tokens < whole.forward_tokens
            assert torch.equal(shared.logits, whole.logits)
            assert all(torch.equal(a, b) for a, b in zip(shared.keys + shared.values, whole.keys + whole.values))
            rows = [shared.index[p] for p in part.index]
            assert torch.equal(part.logits, shared.logits[rows])
            w = part.width
            assert all(torch.equal(a, b[rows, :, b.shape[2] - w:]) for a, b in zip(part.keys + part.values,
                                                                                 shared.keys + shared.values))
    assert intel.calls["own"] > 0


def test_the_exact_prefill_computes_what_the_model_computes():
    """Not simulated: the packed prefill against the model's own forward, prompt by prompt."""
    for arch in ("llama", "gpt2"):
        model, tok = build_tiny_lm(seed=13, arch=arch)
        ids = tokenize(tok, DINO_LIKE + OTHER)
        with torch.inference_mode():
            ours = extend_rows(model, ids, pad_id(tok))
            for r, seq in enumerate(ids):
                out = model(input_ids=torch.tensor([seq]), use_cache=True)
                assert torch.allclose(ours.logits[r], out.logits[0, -1], rtol=1e-5, atol=1e-5)
                for layer, (k, v) in enumerate(zip(ours.keys, ours.values)):
                    own = returned_cache(out).layers[layer]
                    assert torch.allclose(k[r, :, :len(seq)], own.keys[0], atol=1e-5)
                    assert torch.allclose(v[r, :, :len(seq)], own.values[0], atol=1e-5)
                    assert not k[r, :, len(seq):].any()
    assert PREFILL_ROWS in INTEL_COUNTS and HEAD_ROWS in INTEL_COUNTS and QUERY_BLOCK == 16


def test_the_last_block_is_cut_to_the_probed_counts_only_where_they_hold_the_whole_block():
    intel = tuple(sorted(INTEL_COUNTS))
    epyc = (4, 8, *range(12, 65), 96, 128, 129, 192, 256, 257, 384, 512)
    assert prefill_rows(54) == (256,) and prefill_rows(531) == (256, 256, 256) and head_rows(72) == (32, 32, 32)
    assert prefill_rows(54, epyc) == (54,) and prefill_rows(531, epyc) == (256, 256, 19)
    assert prefill_rows(512, epyc) == (256, 256) and head_rows(72, epyc) == (32, 32, 8)
    assert prefill_rows(300, intel) == (256, 44) and prefill_rows(10, intel) == (16,)
    assert head_rows(72, intel) == (32, 32, 16)
    assert prefill_rows(150, intel) == (56, 56, 38)  # counts of 16-56, never a 256-row block of 106 zero rows
    # 256 not found invariant (32 not on an Intel CPU's AVX2 path): blocks of the smallest count above it, else of
    # the largest count found (a block of 256 rows need not give a row the same bits wherever it sits)
    assert fixed_blocks(300, 256, (16, 32, 64)) == (64,) * 5 and fixed_blocks(300, 256, (16, 300, 512)) == (300,)
    assert head_rows(72, (*range(4, 31), 33, 64)) == (33, 33, 6)
    assert prefill_rows(0, epyc) == (256,) and prefill_rows(0) == (256,)  # unprobed: whole blocks


@pytest.mark.parametrize("simulated", [False, True])
def test_a_probed_prefill_cuts_its_padding_and_keeps_the_bits(simulated, monkeypatch):
    """A prompt bank given the probe's record forwards fewer rows than whole blocks and gets the same bits, on this
    CPU and on the simulated Xeon (where the remainders are multiplied in blocks of 16-56 rows)."""
    monkeypatch.setenv("DSGEN_CACHE_DIR", "/nonexistent/numerics-cache")
    if simulated:
        simulated_here()
    with IntelLikeGemm(monkeypatch) if simulated else contextlib.nullcontext():
        model, tok = build_tiny_lm(seed=16)
        found = probe(model)
        assert found.shared, found.failed
        prompts = DINO_LIKE + OTHER + ["y" * 300 + ' "']  # more tokens than one 256-row block
        with torch.inference_mode():
            cut = PromptBank(model, tok, prompts, batch_size=32, numerics=found)
            # no counts: every prompt alone (extend_rows, row by row), in whole blocks of PREFILL_ROWS
            whole = PromptBank(model, tok, prompts, batch_size=32, numerics=dataclasses.replace(
                found, kernels=found.kernels._replace(counts=())))
            alone = [PromptBank(model, tok, [p], numerics=found) for p in prompts]
    assert cut.forward_tokens == whole.forward_tokens
    assert whole.forward_rows % PREFILL_ROWS == 0 and whole.forward_rows >= whole.forward_tokens
    assert all(torch.equal(cut.logits[cut.index[p]], bank.logits[0]) for p, bank in zip(prompts, alone))
    if PREFILL_ROWS in found.counts:  # this CPU's or the simulation's counts: whole blocks give the same bits
        assert whole.forward_tokens <= cut.forward_rows < whole.forward_rows
        assert torch.equal(cut.logits, whole.logits)
        assert all(torch.equal(a, b) for a, b in zip(cut.keys + cut.values, whole.keys + whole.values))


@pytest.mark.parametrize("simulated", [False, True])
def test_a_judges_score_does_not_depend_on_its_batch_here_and_on_the_simulated_cpu(simulated, monkeypatch):
    """Each of 40 pairs scores the same bits alone, in pairs and in one batch (its answer row anywhere in the output
    head's blocks), on this machine's own kernels and under the simulation (the earlier left-padded judge gave 2 of
    16 pairs other bits alone under the simulation, and failed on this machine without it)."""
    import random

    from dsgen.generation.judge import option_probabilities

    if simulated:
        simulated_here()
    model, tok = build_tiny_lm(seed=15)
    lm = LoadedLM(model, tok, "tiny", "test", 0.0, False)
    rnd = random.Random(0)
    words = "a cat dog man woman plays guitar runs in the park sun is hot today rain snow two men sleep on sofa".split()
    pair = lambda: " ".join(rnd.choices(words, k=rnd.randint(2, 9)))  # noqa: E731
    prompts = [f"Rate '{pair()}' against '{pair()}' from 1 to 3:" for _ in range(40)]
    options = [("1",), ("2",), ("3",)]
    with IntelLikeGemm(monkeypatch) if simulated else contextlib.nullcontext():
        together = option_probabilities(lm, prompts, options, batch_size=40)
        in_pairs = option_probabilities(lm, prompts, options, batch_size=2)
        alone = [option_probabilities(lm, [p], options, batch_size=1)[0] for p in prompts]
    assert (in_pairs == together).all() and all((a == t).all() for a, t in zip(alone, together))


def test_shared_rows_stay_exact_on_the_simulated_cpu(intel, monkeypatch):
    """The probe passes under the simulation (the prefill by construction, decode steps in blocks of the
    counts that passed), and shared rows give the unshared schedule's outputs with fewer rows."""
    monkeypatch.setenv("DSGEN_CACHE_DIR", "/nonexistent/numerics-cache")  # nothing stored, nothing read
    model, tok = build_tiny_lm(seed=15)
    found = probe(model)
    assert found.shared and found.threads and not found.failed, found.failed
    assert set(found.counts) <= INTEL_COUNTS and found.rows(100) == 100 and found.blocks(100) == (56, 44)
    sampling = SamplingConfig(max_new_tokens=10)
    reqs = make_requests(8, n=4)
    with QuoteBias(model, tok, 2.0, triggers="aeiou"), assume(found):
        shared = DebiasedDecoder(model, tok, sampling, max_rows=96)
        unshared = DebiasedDecoder(model, tok, sampling, max_rows=96, share_rows=False)
        a, b = shared.decode(reqs, seed=4), unshared.decode(reqs, seed=4)
    key = lambda res: [[(o.tokens, o.logprobs, o.accepted) for o in outs] for outs in res]  # noqa: E731
    assert key(a) == key(b)
    assert shared.stats["forward_rows"] < unshared.stats["forward_rows"]
