"""The self-debiasing decode loop: the maths, the schedule, and the cases it must get right or refuse.

Every sampled token is checked against a fresh, uncached forward pass of the full sequence; the
batched core must give exactly the outputs of DINO's one-at-a-time loop under greedy decoding.
"""

import pytest
import torch

from dsgen.errors import DsgenError
from dsgen.generation.batch import ActiveBatch
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.forward import tokenize
from dsgen.generation.outputs import DecodeOutput, DecodeRequest, OutputRules
from dsgen.generation.reference import reference_decode, same_output
from dsgen.generation.sampling import SamplingConfig, TokenSampler, self_debias
from dsgen.models import end_of_text_ids
from tests.conftest import build_tiny_lm


def test_self_debias_hand_computed():
    p = torch.tensor([[0.5, 0.3, 0.2]])
    pc = torch.tensor([[0.2, 0.6, 0.2]])
    # delta = (0, 0.3, 0); lambda 100: factor max(exp(-30), 0.01) = 0.01 -> (0.5, 0.003, 0.2) / 0.703
    out = self_debias(p, pc.clone(), 100.0, 0.01)  # p_counter is working memory
    assert out[0].tolist() == pytest.approx([0.5 / 0.703, 0.003 / 0.703, 0.2 / 0.703], abs=1e-7)
    # lambda 1: factor exp(-0.3) = 0.7408182 -> (0.5, 0.2222455, 0.2) / 0.9222455
    out = self_debias(p, pc.clone(), 1.0, 0.01)
    assert out[0].tolist() == pytest.approx([0.5421550, 0.2409823, 0.2168627], abs=1e-6)
    # no counter mass above the main one: unchanged
    assert self_debias(p, torch.zeros_like(p), 100.0, 0.01)[0].tolist() == pytest.approx(p[0].tolist())


def test_sampler_max_over_counter_rows_and_topk():
    # rows: group 0 = main row 0 + counters 1, 2; group 1 = main row 3 alone
    probs = torch.tensor([[0.4, 0.4, 0.2], [0.1, 0.8, 0.1], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]])
    sampler = TokenSampler(SamplingConfig(top_k=0, top_p=1.0), [], torch.Generator())
    dist = sampler.distribution(probs.log(), torch.tensor([0, 3]), torch.tensor([1, 2]), torch.tensor([0, 0]))
    # counter max = (0.6, 0.8, 0.2): delta = (0.2, 0.4, 0): factors 0.01, 0.01, 1
    expected = torch.tensor([0.004, 0.004, 0.2]) / 0.208
    assert dist[0].tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert dist[1].tolist() == pytest.approx([0.3, 0.3, 0.4], abs=1e-6)
    top1 = TokenSampler(SamplingConfig(top_k=1, top_p=1.0), [], torch.Generator())
    tokens, logprobs = top1.sample(probs.log(), torch.tensor([0, 3]), torch.tensor([1, 2]), torch.tensor([0, 0]))
    assert tokens.tolist() == [2, 2] and logprobs.tolist() == pytest.approx([0.0, 0.0])
    blocked = TokenSampler(SamplingConfig(top_k=0, top_p=1.0, decay_constant=0), [2], torch.Generator())
    assert blocked.distribution(probs.log(), torch.tensor([3]), torch.tensor([], dtype=torch.long),
                                torch.tensor([], dtype=torch.long))[0, 2] == 0


def test_a_groups_distribution_depends_on_its_rows_alone():
    # a vocabulary as large as SmolLM2's: PyTorch sums a lone row of this width on two threads in two parts, so a
    # sum over it would give a group other bits alone than beside others
    torch.manual_seed(0)
    logits = torch.randn(6, 49152) * 4
    groups = {"two counters": ([0], [1, 2]), "none": ([3], []), "one counter": ([4], [5])}
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            sampler = TokenSampler(SamplingConfig(), [], torch.Generator())
            together = sampler.distribution(logits, torch.tensor([0, 3, 4]), torch.tensor([1, 2, 5]),
                                            torch.tensor([0, 0, 2]))
            for gi, (main, counters) in enumerate(groups.values()):
                alone = sampler.distribution(logits, torch.tensor(main), torch.tensor(counters, dtype=torch.long),
                                             torch.zeros(len(counters), dtype=torch.long))
                assert torch.equal(alone[0], together[gi]), (n, list(groups)[gi])
    finally:
        torch.set_num_threads(threads)


def test_groups_with_the_same_rows_are_sampled_from_one_distribution():
    torch.manual_seed(1)
    logits = torch.randn(5, 1000) * 3
    # 20 groups (two blocks of the sampler's 16), four distinct: rows (0 | 1, 2), (3 | -), (0 | 1, 2) ..., (4 | 1)
    distinct = [([0], [1, 2]), ([3], []), ([4], [1]), ([2], [0])]
    copies = [i % 4 if i % 3 else 0 for i in range(20)]
    rows = [distinct[c] for c in copies]

    def layout(groups):
        counters = [(r, gi) for gi, (_, cs) in enumerate(groups) for r in cs]
        return (torch.tensor([m[0] for m, _ in groups]), torch.tensor([r for r, _ in counters], dtype=torch.long),
                torch.tensor([gi for _, gi in counters], dtype=torch.long))

    each = TokenSampler(SamplingConfig(), [], torch.Generator().manual_seed(7)).sample(logits, *layout(rows))
    once = TokenSampler(SamplingConfig(), [], torch.Generator().manual_seed(7)).sample(
        logits, *layout(distinct), torch.tensor(copies))
    assert torch.equal(each[0], once[0]) and torch.equal(each[1], once[1])


class Script:
    """Forces the LM's next token at each forward call (a forward hook on the LM head)."""

    def __init__(self, lm, tokens_per_call):
        self.model = lm.model if hasattr(lm, "tokenizer") else lm  # a LoadedLM or a bare model
        self.calls, self.tokens = 0, tokens_per_call
        self.seen = []

    def __enter__(self):
        def hook(module, args, output):
            tok = self.tokens(self.calls)
            self.calls += 1
            if tok is None:
                return output
            forced = torch.full_like(output, -1e4)
            forced[..., tok] = 0.0
            return forced

        def record(module, args, kwargs):
            self.seen.append(kwargs.get("input_ids", args[0] if args else None))

        self.h1 = self.model.get_output_embeddings().register_forward_hook(hook)
        self.h2 = self.model.register_forward_pre_hook(record, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.h1.remove()
        self.h2.remove()


class QuoteBias:
    """Raises the logit of the closing quote so that random tiny models close their outputs: by
    ``bias`` everywhere, or only after one of the ``triggers`` characters (a function of the
    sequence alone, so the batched core, the reference loop and an uncached pass all see it).

    With triggers, each row's last *real* token decides: the prefill pads new tokens on the right
    (:func:`dsgen.generation.forward.extend_rows`), so the last column may be padding (the pad id,
    which is never a trigger and never a prompt's or sampled token here)."""

    def __init__(self, model, tok, bias=4.0, quote='"', triggers=None):
        self.model, self.bias, self.qid = model, bias, tok.convert_tokens_to_ids(quote)
        self.pad = tok.pad_token_id
        self.triggers = None if triggers is None else torch.tensor([tok.convert_tokens_to_ids(c) for c in triggers])

    def __enter__(self):
        def pre(module, args, kwargs):
            self.ids = kwargs.get("input_ids", args[0] if args else None)

        def hook(module, args, output):
            output = output.clone()
            if self.triggers is None:
                output[..., self.qid] += self.bias
            else:
                last = self.last_real(self.ids)[:, None] if output.shape[1] == 1 else self.ids[:, -output.shape[1]:]
                output[..., self.qid] += self.bias * torch.isin(last, self.triggers.to(last.device)).to(output.dtype)
            return output

        self.h0 = self.model.register_forward_pre_hook(pre, with_kwargs=True)
        self.h = self.model.get_output_embeddings().register_forward_hook(hook)
        return self

    def last_real(self, ids):
        """Each row's last token that is not padding (left- or right-padded rows alike)."""
        columns = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        at = torch.where(ids != self.pad, columns, -1).amax(dim=1).clamp_min(0)
        return ids.gather(1, at[:, None])[:, 0]

    def __exit__(self, *exc):
        self.h0.remove()
        self.h.remove()


def ids(tok, text):
    return tok.convert_tokens_to_ids(text)


def test_quote_inside_multichar_token_keeps_text_before_quote(tiny_lm):
    tok = tiny_lm.tokenizer
    seq = [ids(tok, "A"), ids(tok, "b"), ids(tok, '."'), ids(tok, "Z")]
    with Script(tiny_lm, lambda call: seq[min(call, len(seq) - 1)] if call > 0 else seq[0]):
        dec = DebiasedDecoder(tiny_lm.model, tok, SamplingConfig(top_k=1, top_p=1.0), max_rows=8)
        (outs,) = dec.decode([DecodeRequest('Say "', n=1)], seed=0)
    assert outs[0].text == "Ab." and outs[0].accepted
    assert outs[0].n_tokens == 3  # ended at the token holding the quote


def test_unclosed_outputs_are_dropped_and_retried_only_when_asked(tiny_lm):
    tok = tiny_lm.tokenizer
    never = ids(tok, "x")
    with Script(tiny_lm, lambda call: never):
        dec = DebiasedDecoder(tiny_lm.model, tok, SamplingConfig(max_new_tokens=6), max_rows=8)
        (once,) = dec.decode([DecodeRequest('Say "', n=2)], seed=0)  # DINO: one draw, no retry
        (retried,) = dec.decode([DecodeRequest('Say "', n=2, max_attempts=5)], seed=0)
    assert len(once) == 2 and {o.attempt for o in once} == {1}
    assert not any(o.accepted for o in retried)
    assert sorted({o.attempt for o in retried}) == [1, 2, 3, 4, 5]
    assert all(o.text is None and o.n_tokens == 6 for o in retried)
    rules = OutputRules(tok)
    assert rules.judge('one\ntwo" rest') == ("one\ntwo", "newline")
    assert rules.judge('" rest') == ("", "empty")
    assert OutputRules(tok, allow_newlines=True).judge('one\ntwo"') == ("one\ntwo", None)
    assert OutputRules(tok, keep_unclosed=True).judge("open ended") == ("open ended", None)


def test_counter_rows_follow_the_main_row(tiny_lm):
    with Script(tiny_lm, lambda call: None) as script:
        dec = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, SamplingConfig(max_new_tokens=8, stop_at_newline=False,
                                                                               top_k=0, top_p=1.0), max_rows=64)
        dec.decode([DecodeRequest('Main "', ('Counter one "', 'Counter two "'), n=1)], seed=3)
    steps = [x for x in script.seen if x is not None and x.shape[1] == 1]
    assert len(steps) >= 3
    from dsgen.generation.invariance import numerics

    for x in steps:  # 3 rows, padded to a batch-invariant row count (4 with MKL on AVX2 and AVX-512 CPUs)
        assert x.shape[0] == numerics(tiny_lm.model).rows(3) and len(set(x[:3, 0].tolist())) == 1 and not x[3:, 0].any()


def make_requests(n_inputs=6, n=2, quote='"'):
    """Prompts of different lengths (inputs of growing length) for three labels, DINO's counter structure."""
    reqs = []
    for i in range(n_inputs):
        x1 = f"Input {i} is " + "here " * (i % 4) + "now."
        prompts = {lab: f'Task {lab}: "{x1}" then {quote}' for lab in ("1", "h", "0")}
        reqs += [DecodeRequest(prompts["1"], (), n), DecodeRequest(prompts["h"], (prompts["1"],), n),
                 DecodeRequest(prompts["0"], (prompts["1"], prompts["h"]), n)]
    return reqs


def test_same_seed_same_outputs_other_seed_other_outputs(tiny_lm):
    sampling = SamplingConfig(max_new_tokens=16)
    reqs = make_requests()
    with QuoteBias(tiny_lm.model, tiny_lm.tokenizer, 2.0):
        a = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=7)
        b = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=7)
        c = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=8)
    key = lambda res: [[(o.text, o.tokens) for o in outs] for outs in res]  # noqa: E731
    assert key(a) == key(b)
    assert key(a) != key(c)
    assert sum(o.accepted for outs in a for o in outs) >= 10


def test_a_decode_sets_the_objects_alive_before_it_aside_from_the_collector(tiny_lm):
    """A decode runs with the heap frozen (dsgen.heap.heap_frozen, whose own test covers nesting and a freeze made
    before), so the full collections it triggers skip the model's objects; unfrozen after."""
    import gc

    gc.unfreeze()  # CPython 3.12 starts with some static tuples frozen: start from nothing frozen
    inside: list[int] = []
    dec = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, SamplingConfig(max_new_tokens=6), max_rows=8)
    dec.decode(make_requests(n_inputs=1, n=1)[:1], seed=0,
               on_group_done=lambda out: inside.append(gc.get_freeze_count()))
    assert inside and min(inside) > 0 and gc.get_freeze_count() == 0


def test_at_decay_0_counter_prompts_change_no_output(tiny_lm):
    """Self-debiasing at a decay constant of 0 leaves every distribution as it is, so decoding the counter prompts
    changes no token: the same outputs with and without them, where both schedules admit every group at once (the
    generator drops them at decay 0, DebiasedGenerator.spec). At lambda 100 they do change the outputs."""
    key = lambda res: [[(o.text, o.tokens) for o in outs] for outs in res]  # noqa: E731
    reqs = make_requests()
    bare = [DecodeRequest(r.prompt, (), r.n) for r in reqs]
    with QuoteBias(tiny_lm.model, tiny_lm.tokenizer, 2.0):
        outputs = {(decay, counters): key(DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer,
                                                          SamplingConfig(max_new_tokens=16, decay_constant=decay),
                                                          max_rows=128).decode(reqs if counters else bare, seed=7))
                   for decay in (0.0, 100.0) for counters in (True, False)}
    assert outputs[0.0, True] == outputs[0.0, False]
    assert outputs[100.0, True] != outputs[100.0, False] and outputs[100.0, False] == outputs[0.0, False]


def test_greedy_core_matches_reference_loop_exactly(tiny_lm):
    """Top-k 1: the batched core (a 7-row budget and 2 spare columns that force admission into a
    running batch, packing of rows and moving of columns) and DINO's one-at-a-time loop give the
    same outputs, every one."""
    sampling = SamplingConfig(top_k=1, max_new_tokens=12)
    reqs = [DecodeRequest(r.prompt, r.counter_prompts, 1) for r in make_requests(8)]
    with QuoteBias(tiny_lm.model, tiny_lm.tokenizer, 3.0, triggers="aeiou"):
        dec = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=7, spare_columns=2)
        core = dec.decode(reqs, seed=0)
        ref = reference_decode(tiny_lm.model, tiny_lm.tokenizer, reqs, sampling, seed=0)
    assert dec.stats["joined_running_batch"] > 0 and dec.stats["column_moves"] > 0 and dec.stats["row_moves"] > 0
    assert len({len(tokenize(tiny_lm.tokenizer, [r.prompt])[0]) for r in reqs}) >= 4  # prompts of different lengths
    assert sum(c[0].accepted for c in core) >= len(core) // 3, "the test needs closed outputs to compare"
    assert all(same_output(c[0], r[0]) for c, r in zip(core, ref))


def uncached_distribution(model, tok, req, prefix, sampler):
    """The distribution of the next token after ``prefix``, from full forward passes without cache, of
    each prompt alone as the tokenizer encodes it (independent of dsgen's batching and padding)."""
    rows = []
    dev = next(model.parameters()).device
    for prompt in (req.prompt, *req.counter_prompts):
        seq = list(tok(prompt)["input_ids"]) + list(prefix)
        rows.append(model(input_ids=torch.tensor([seq], device=dev)).logits[0, -1].float())
    logits = torch.stack(rows)
    n_counter = len(req.counter_prompts)
    return sampler.distribution(logits, torch.tensor([0], device=dev), torch.arange(1, 1 + n_counter, device=dev),
                                torch.zeros(n_counter, dtype=torch.long, device=dev))[0]


def check_rederived(model, tok, reqs, results, sampling, blocked):
    """Every sampled token had the probability the core says, under a fresh uncached forward pass."""
    sampler = TokenSampler(sampling, blocked, torch.Generator())
    checked = 0
    with torch.inference_mode():
        for req, outs in zip(reqs, results):
            for o in outs:
                for i, (t, lp) in enumerate(zip(o.tokens, o.logprobs)):
                    p = uncached_distribution(model, tok, req, o.tokens[:i], sampler)
                    assert p[t] > 0, f"token {t} had probability 0 under the uncached pass"
                    assert torch.log(p[t]).item() == pytest.approx(lp, abs=2e-4)
                    checked += 1
    return checked


def test_every_sampled_token_is_rederived_from_an_uncached_forward_pass(tiny_lm):
    sampling = SamplingConfig(max_new_tokens=10)
    reqs = make_requests(5)
    model, tok = tiny_lm.model, tiny_lm.tokenizer
    with QuoteBias(model, tok, 1.0):
        dec = DebiasedDecoder(model, tok, sampling, max_rows=7, spare_columns=2)
        results = dec.decode(reqs, seed=11)
        assert dec.stats["joined_running_batch"] > 0 and dec.stats["column_moves"] > 0 and dec.stats["row_moves"] > 0
        assert check_rederived(model, tok, reqs, results, sampling, dec.blocked_ids()) > 50


def test_right_padding_tokenizer_gives_the_same_outputs(tiny_lm):
    """A tokenizer that pads on the right with a real token as its pad id ('?', which no prompt holds):
    had the decoder asked it to pad, the padding would reach the model as text at the wrong
    positions. Every sampled token is rederived from an uncached forward pass of the prompt alone (no
    padding at all), and the outputs equal those of the left-padding tokenizer."""
    from transformers import PreTrainedTokenizerFast

    right = PreTrainedTokenizerFast(tokenizer_object=tiny_lm.tokenizer.backend_tokenizer, pad_token="?",
                                    eos_token="<eos>", padding_side="right")
    assert right.pad_token_id == ids(right, "?") != tiny_lm.tokenizer.pad_token_id
    padded = right(["A", "Longer text"], padding=True)["input_ids"]
    assert padded[0][-1] == right.pad_token_id  # this tokenizer's padding is on the right, with '?'
    reqs = make_requests(4)
    assert not any("?" in p for r in reqs for p in (r.prompt, *r.counter_prompts))
    sampling = SamplingConfig(max_new_tokens=10)
    model = tiny_lm.model
    with QuoteBias(model, tiny_lm.tokenizer, 1.0):
        dec = DebiasedDecoder(model, right, sampling, max_rows=9)
        right_out = dec.decode(reqs, seed=2)
        assert check_rederived(model, right, reqs, right_out, sampling, dec.blocked_ids()) > 50
        left_out = DebiasedDecoder(model, tiny_lm.tokenizer, sampling, max_rows=9).decode(reqs, seed=2)
        greedy = SamplingConfig(top_k=1, max_new_tokens=10)
        ref = reference_decode(model, right, reqs, greedy, seed=2)
        ref_left = reference_decode(model, tiny_lm.tokenizer, reqs, greedy, seed=2)
    assert [[o.tokens for o in outs] for outs in left_out] == [[o.tokens for o in outs] for outs in right_out]
    assert [[o.tokens for o in outs] for outs in ref] == [[o.tokens for o in outs] for outs in ref_left]


def test_sliding_window_model_works_inside_its_window_and_refuses_beyond():
    model, tok = build_tiny_lm(seed=1, arch="mistral", sliding_window=40)
    reqs = [DecodeRequest('Hi "', (), 1), DecodeRequest('A much longer prompt "', ('Other "',), 1)]
    sampling = SamplingConfig(max_new_tokens=5, top_k=0, top_p=1.0)
    with QuoteBias(model, tok, 0.5):
        dec = DebiasedDecoder(model, tok, sampling, max_rows=3)
        results = dec.decode(reqs, seed=4)
        assert check_rederived(model, tok, reqs, results, sampling, dec.blocked_ids()) >= 5
    too_long = DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=20), max_rows=3)
    with pytest.raises(DsgenError, match=r"sliding attention window \(40\)") as err:
        too_long.decode(reqs, seed=4)
    assert "\n" not in str(err.value)
    with pytest.raises(DsgenError, match="sliding attention window"):
        reference_decode(model, tok, reqs, SamplingConfig(max_new_tokens=20), seed=4)


def test_a_row_beyond_a_models_learned_positions_is_refused_in_one_line_not_crashed():
    """GPT-2 has no embedding past n_positions: a prompt and its output that do not fit are refused before decoding
    (an IndexError deep in the forward before)."""
    model, tok = build_tiny_lm(seed=1, arch="gpt2", n_positions=128)
    reqs = [DecodeRequest('A much longer prompt "', (), 1)]
    assert DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=8), max_rows=2).decode(reqs, seed=0)
    with pytest.raises(DsgenError, match=r"learned positions \(128\)") as err:
        DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=120), max_rows=2).decode(reqs, seed=0)
    assert "\n" not in str(err.value)


def test_end_of_text_ends_the_group_unless_suppressed_and_every_declared_id_is_suppressed():
    model, tok = build_tiny_lm(seed=2)
    eos, other_end = tok.eos_token_id, ids(tok, "Z")
    model.generation_config.eos_token_id = [eos, other_end]  # a model declaring two end-of-text ids
    assert end_of_text_ids(model, tok) == [eos, other_end]
    script = [ids(tok, "a"), eos, ids(tok, "b"), ids(tok, '"')]
    with Script(model, lambda call: script[min(call, len(script) - 1)]):
        (ended,) = DebiasedDecoder(model, tok, SamplingConfig(suppress_eos=False, max_new_tokens=8)).decode(
            [DecodeRequest('Say "', n=1)], seed=0)
    assert ended[0].tokens == [ids(tok, "a"), eos] and not ended[0].accepted and ended[0].text is None
    with Script(model, lambda call: eos if call % 2 else other_end):  # only end ids are likely
        (suppressed,) = DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=6)).decode(
            [DecodeRequest('Say "', n=2)], seed=0)
        ref = reference_decode(model, tok, [DecodeRequest('Say "', n=2)], SamplingConfig(max_new_tokens=6), seed=0)
    for o in suppressed + ref[0]:
        assert eos not in o.tokens and other_end not in o.tokens and len(o.tokens) == 6


def test_allow_newlines_keeps_outputs_with_newlines():
    model, tok = build_tiny_lm(seed=3)
    script = [ids(tok, "a"), ids(tok, "\n"), ids(tok, "b"), ids(tok, '"')]
    forced = lambda call: script[min(call, len(script) - 1)]  # noqa: E731
    with Script(model, forced):
        (dropped,) = DebiasedDecoder(model, tok, SamplingConfig()).decode([DecodeRequest('Say "', n=1)], seed=0)
    assert not dropped[0].accepted and dropped[0].n_tokens == 2  # stopped early at the newline, discarded
    with Script(model, forced):
        dec = DebiasedDecoder(model, tok, SamplingConfig(), rules=OutputRules(tok, allow_newlines=True))
        (kept,) = dec.decode([DecodeRequest('Say "', n=1)], seed=0)
    assert kept[0].accepted and kept[0].text == "a\nb" and kept[0].n_tokens == 4


def test_ids_beyond_the_tokenizer_in_a_padded_vocabulary_are_never_sampled():
    model, tok = build_tiny_lm(seed=4, extra_vocab=8)
    beyond = len(tok) + 3
    with Script(model, lambda call: beyond):
        (outs,) = DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=5)).decode([DecodeRequest('Say "', n=2)], seed=0)
        ref = reference_decode(model, tok, [DecodeRequest('Say "', n=2)], SamplingConfig(max_new_tokens=5), seed=0)
    for o in outs + ref[0]:
        assert all(t < len(tok) for t in o.tokens) and len(o.tokens) == 5


def test_a_curly_quote_spec_closes_with_the_curly_closing_quote(tmp_path):
    from dsgen.taskspec import load_task_spec

    spec_file = tmp_path / "curly.json"
    spec_file.write_text('{"task_name": "c", "labels": {"a": {"instruction": "Say \\u201c<X1>\\u201d and \\u201c", '
                         '"counter_labels": []}}}')
    spec = load_task_spec(str(spec_file), with_inputs=True)
    assert spec.close_quote == "\u201d"
    model, tok = build_tiny_lm(seed=5)
    script = [ids(tok, "o"), ids(tok, "k"), ids(tok, "\u201d"), ids(tok, "x")]
    with Script(model, lambda call: script[min(call, len(script) - 1)]):
        dec = DebiasedDecoder(model, tok, SamplingConfig(), rules=OutputRules(tok, close_quote=spec.close_quote))
        (outs,) = dec.decode([DecodeRequest(spec.prompt("a", "hi"), n=1)], seed=0)
    assert outs[0].accepted and outs[0].text == "ok" and outs[0].n_tokens == 3
    mixed = tmp_path / "mixed.json"
    mixed.write_text('{"labels": {"a": {"instruction": "\\u201c<X1>\\u201d \\u201c"}, "b": {"instruction": "\\"<X1>\\" \\""}}}')
    with pytest.raises(DsgenError, match="same opening quotation mark"):
        load_task_spec(str(mixed), with_inputs=True)


@pytest.mark.parametrize("stacked", [True, False], ids=["one-tensor", "per-layer"])
def test_active_batch_checks_its_invariant_and_moves_whole_rows(tiny_lm, stacked):
    from dsgen.generation.batch import PromptBank
    from dsgen.generation.invariance import numerics

    found = numerics(tiny_lm.model)
    bank = PromptBank(tiny_lm.model, tiny_lm.tokenizer, ['Say "', 'Tell me "'], numerics=found)
    batch = ActiveBatch(tiny_lm.model, torch.device("cpu"), max_rows=4, max_columns=bank.width + 5,
                        first_column=bank.width, numerics=found)
    slots = batch.admit(bank, ['Say "', 'Tell me "', 'Say "', 'Tell me "'])
    # every layer's buffers share a shape here, so they are views of one tensor and a row moves in one copy;
    # without it (a model whose layers differ), rows move layer by layer
    assert batch.stacked is not None and batch.values[-1].data_ptr() == batch.stacked[-1].data_ptr()
    if not stacked:
        batch.stacked = None
    assert slots == [0, 1, 2, 3] and batch.live == 4
    with torch.inference_mode():
        batch.advance(torch.tensor([5, 6, 7, 8]))
    batch.release([1])
    assert batch.free == [1] and batch.rows == found.rows(4)  # 4 used slots, padded as probed (4 on an AMD EPYC)
    batch.check()
    row3 = [k[3, :, :batch.w].clone() for k in batch.keys]
    assert batch.compact() == {3: 1} and batch.used == 3 and batch.free == []
    assert all(torch.equal(k[1, :, :batch.w], r) for k, r in zip(batch.keys, row3))
    assert batch.fork([1]) == [3] and all(torch.equal(k[3, :, :batch.w], r) for k, r in zip(batch.keys, row3))
    assert torch.equal(batch.mask[3], batch.mask[1]) and batch.pos[3] == batch.pos[1]
    batch.release([2])
    batch.mask[2, batch.w - 1] = 1  # a free row that attends to something
    with pytest.raises(RuntimeError, match="out of step"):
        batch.check()
    batch.mask[2] = 0
    batch.mask[0, batch.w - 1] = 0  # a live row that lost its last column
    with pytest.raises(RuntimeError, match="out of step"):
        batch.check()


def test_candidate_sampler_equals_the_transformers_warpers():
    """Top-k then top-p on the k candidates is the distribution of transformers' TopK + TopP warpers."""
    from transformers import LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper

    torch.manual_seed(0)
    logits = torch.randn(6, 300) * 3
    rows = torch.arange(6)
    none = torch.tensor([], dtype=torch.long)
    for k, p in ((5, 0.9), (5, 1.0), (50, 0.9), (1, 0.5)):
        ours = TokenSampler(SamplingConfig(top_k=k, top_p=p, decay_constant=0), [], torch.Generator())
        warpers = LogitsProcessorList([TopKLogitsWarper(top_k=k)] + ([TopPLogitsWarper(top_p=p)] if p < 1 else []))
        expected = torch.softmax(warpers(None, torch.log_softmax(logits, -1)), -1)
        assert torch.allclose(ours.distribution(logits, rows, none, none), expected, atol=1e-6)


def test_an_end_of_text_id_beyond_the_vocabulary_is_ignored_not_a_crash():
    """A tokenizer or generation config may declare an end id the logits do not have (one list, filtered
    once by the output rules, serves the sampler's blocked ids, the reference loop and the stop test)."""
    model, tok = build_tiny_lm(seed=2)
    vocab = model.get_output_embeddings().weight.shape[0]
    ends = [tok.eos_token_id, vocab + 3]
    dec = DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=4), end_ids=ends)
    (outs,) = dec.decode([DecodeRequest('Say "', n=2)], seed=0)
    assert len(outs) == 2 and all(tok.eos_token_id not in o.tokens for o in outs)
    assert dec.blocked_ids() == [tok.eos_token_id] and dec.end_ids == [tok.eos_token_id] == dec.rules.end_ids
    (ref,) = reference_decode(model, tok, [DecodeRequest('Say "', n=1)], SamplingConfig(max_new_tokens=4), seed=0,
                              end_ids=ends)
    assert len(ref) == 1


def test_an_output_the_core_ended_at_a_newline_is_the_same_output_as_the_references():
    """The one comparison of the core and the reference loop (CPU and GPU tests, the benchmark): the core
    stops at a newline (text None), the reference decodes on and keeps the text with its newline."""
    model, tok = build_tiny_lm(seed=3)
    script = [ids(tok, "a"), ids(tok, "\n"), ids(tok, "b"), ids(tok, '"')]
    req = [DecodeRequest('Say "', n=1)]
    with Script(model, lambda call: script[min(call, len(script) - 1)]):
        (core,) = DebiasedDecoder(model, tok, SamplingConfig(top_k=1, max_new_tokens=6)).decode(req, seed=0)
    with Script(model, lambda call: script[min(call, len(script) - 1)]):
        (ref,) = reference_decode(model, tok, req, SamplingConfig(top_k=1, max_new_tokens=6), seed=0)
    assert core[0].text is None and ref[0].text == "a\nb" and not core[0].accepted and not ref[0].accepted
    assert (core[0].accepted, core[0].text) != (ref[0].accepted, ref[0].text)  # what test_gpu.py compared before
    assert same_output(core[0], ref[0])
    assert not same_output(core[0], DecodeOutput("a", "a", [ids(tok, "a")], 1, True, [0.0]))


def test_rejected_outputs_are_counted_by_their_own_reason():
    """A group ended at a newline has no text (no closing quote came): it is a newline rejection,
    not an unclosed one (the sidecar's counts were all `unclosed` before)."""
    from dsgen.taskspec import OutputFormat

    judge = OutputFormat().judge
    assert judge("A man\n") == (None, "newline")
    assert judge("A man walks") == (None, "unclosed")
    assert judge('"') == ("", "empty")
    assert judge('A man\nwalks"') == ("A man\nwalks", "newline")
    assert judge('A man walks." He') == ("A man walks.", None)


def test_structured_outputs_end_at_their_mark_and_parse_into_their_fields():
    """E5's JSON triplets and Sim-GPT's numbered answers: one call, several texts, every field or nothing."""
    from dsgen.taskspec import OutputFormat

    e5 = OutputFormat("json", "}", ("S1", "S2", "S3"), "S1", (("S2", "entailment"), ("S3", "contradiction")))
    text, reason = e5.judge('"S1": "A dog runs.", "S2": "A dog is running.",\n "S3": "A cat sleeps."} trailing')
    assert reason is None and e5.pair_texts(None, text) == [("A dog runs.", "A dog is running.", "entailment"),
                                                             ("A dog runs.", "A cat sleeps.", "contradiction")]
    assert e5.judge('"S1": "A dog runs.", "S2": "x"}')[1] == "unparsed"  # a field missing
    assert e5.judge('"S1": "A dog runs.", "S2": ')[1] == "unclosed"
    sim = OutputFormat("numbered", "\n\n", ("similar", "dissimilar"), None,
                       (("similar", "entailment"), ("dissimilar", "contradiction")))
    text, reason = sim.judge("A man plays music. \n2. A man sleeps.\n\nInput: more")
    assert reason is None and sim.pair_texts("A man plays a guitar.", text) == [
        ("A man plays a guitar.", "A man plays music.", "entailment"),
        ("A man plays a guitar.", "A man sleeps.", "contradiction")]
    assert sim.judge("A man plays music.\n3. wrong\n\n")[1] == "unparsed"
