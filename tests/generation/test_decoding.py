import pytest
import torch

from dsgen.generation.decoding import (DebiasedDecoder, DecodeRequest, OutputRules, SamplingConfig, TokenSampler,
                                       reference_decode, self_debias)


def test_self_debias_hand_computed():
    p = torch.tensor([[0.5, 0.3, 0.2]])
    pc = torch.tensor([[0.2, 0.6, 0.2]])
    # delta = (0, 0.3, 0); lambda 100: factor max(exp(-30), 0.01) = 0.01 -> (0.5, 0.003, 0.2) / 0.703
    out = self_debias(p, pc, 100.0, 0.01)
    assert out[0].tolist() == pytest.approx([0.5 / 0.703, 0.003 / 0.703, 0.2 / 0.703], abs=1e-7)
    # lambda 1: factor exp(-0.3) = 0.7408182 -> (0.5, 0.2222455, 0.2) / 0.9222455
    out = self_debias(p, pc, 1.0, 0.01)
    assert out[0].tolist() == pytest.approx([0.5421550, 0.2409823, 0.2168627], abs=1e-6)
    # no counter mass above the main one: unchanged
    assert self_debias(p, torch.zeros_like(p), 100.0, 0.01)[0].tolist() == pytest.approx(p[0].tolist())


def test_sampler_max_over_counter_rows_and_topk():
    # rows: group 0 = main row 0 + counters 1, 2; group 1 = main row 3 alone
    probs = torch.tensor([[0.4, 0.4, 0.2], [0.1, 0.8, 0.1], [0.6, 0.2, 0.2], [0.3, 0.3, 0.4]])
    sampler = TokenSampler(SamplingConfig(top_k=0, top_p=1.0, suppress_eos=False), [], torch.Generator())
    dist = sampler.distribution(probs.log(), torch.tensor([0, 3]), torch.tensor([1, 2]), torch.tensor([0, 0]))
    # counter max = (0.6, 0.8, 0.2): delta = (0.2, 0.4, 0): factors 0.01, 0.01, 1
    expected = torch.tensor([0.004, 0.004, 0.2]) / 0.208
    assert dist[0].tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert dist[1].tolist() == pytest.approx([0.3, 0.3, 0.4], abs=1e-6)
    top1 = TokenSampler(SamplingConfig(top_k=1, top_p=1.0, suppress_eos=False), [], torch.Generator())
    assert top1.sample(probs.log(), torch.tensor([0, 3]), torch.tensor([1, 2]), torch.tensor([0, 0])).tolist() == [2, 2]


class Script:
    """Forces the LM's next token at each forward call (a forward hook on lm_head)."""

    def __init__(self, lm, tokens_per_call):
        self.lm, self.calls, self.tokens = lm, 0, tokens_per_call
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

        self.h1 = self.lm.model.lm_head.register_forward_hook(hook)
        self.h2 = self.lm.model.register_forward_pre_hook(record, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self.h1.remove()
        self.h2.remove()


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


def test_unclosed_and_newline_outputs_are_dropped_after_max_attempts(tiny_lm):
    tok = tiny_lm.tokenizer
    never = ids(tok, "x")
    with Script(tiny_lm, lambda call: never):
        dec = DebiasedDecoder(tiny_lm.model, tok, SamplingConfig(max_new_tokens=6), max_rows=8)
        (outs,) = dec.decode([DecodeRequest('Say "', n=2, max_attempts=5)], seed=0)
    assert not any(o.accepted for o in outs)
    assert sorted({o.attempt for o in outs}) == [1, 2, 3, 4, 5]
    assert all(o.text is None and o.n_tokens == 6 for o in outs)
    rules = OutputRules(tok)
    assert rules.judge('one\ntwo" rest') == ("one\ntwo", False)
    assert rules.judge('" rest') == ("", False)
    assert OutputRules(tok, allow_newlines=True).judge('one\ntwo"') == ("one\ntwo", True)
    assert OutputRules(tok, keep_unclosed=True).judge("open ended") == ("open ended", True)


def test_counter_rows_follow_the_main_row(tiny_lm):
    with Script(tiny_lm, lambda call: None) as script:
        dec = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, SamplingConfig(max_new_tokens=8, stop_at_newline=False,
                                                                               top_k=0, top_p=1.0), max_rows=64)
        dec.decode([DecodeRequest('Main "', ('Counter one "', 'Counter two "'), n=1, max_attempts=1)], seed=3)
    steps = [x for x in script.seen if x is not None and x.shape[1] == 1]
    assert len(steps) >= 3
    for x in steps:
        assert x.shape[0] == 3 and len(set(x[:, 0].tolist())) == 1


def make_requests(n_inputs=6):
    reqs = []
    for i in range(n_inputs):
        x1 = f"Input {i} is here."
        prompts = {lab: f'Task {lab}: "{x1}" then "' for lab in ("1", "h", "0")}
        reqs += [DecodeRequest(prompts["1"], (), 2), DecodeRequest(prompts["h"], (prompts["1"],), 2),
                 DecodeRequest(prompts["0"], (prompts["1"], prompts["h"]), 2)]
    return reqs


class QuoteBias:
    """Adds a bias to the quote token so that random tiny models close their outputs."""

    def __init__(self, lm, bias=4.0):
        self.lm, self.bias = lm, bias

    def __enter__(self):
        qid = self.lm.tokenizer.convert_tokens_to_ids('"')

        def hook(module, args, output):
            output = output.clone()
            output[..., qid] += self.bias
            return output

        self.h = self.lm.model.lm_head.register_forward_hook(hook)
        return self

    def __exit__(self, *exc):
        self.h.remove()


def test_same_seed_same_outputs_other_seed_other_outputs(tiny_lm):
    sampling = SamplingConfig(max_new_tokens=16)
    reqs = make_requests()
    with QuoteBias(tiny_lm, 2.0):
        a = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=7)
        b = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=7)
        c = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=16).decode(reqs, seed=8)
    key = lambda res: [[(o.text, o.attempt) for o in outs] for outs in res]  # noqa: E731
    assert key(a) == key(b)
    assert key(a) != key(c)
    assert sum(o.accepted for outs in a for o in outs) >= 10


def test_greedy_core_matches_reference_loop(tiny_lm):
    """With top-k 1 the batched core and DINO's one-at-a-time loop give the same x2 (>= 95%)."""
    sampling = SamplingConfig(top_k=1, max_new_tokens=12)
    reqs = [DecodeRequest(r.prompt, r.counter_prompts, 1, 1) for r in make_requests(8)]
    with QuoteBias(tiny_lm, 1.5):
        core = DebiasedDecoder(tiny_lm.model, tiny_lm.tokenizer, sampling, max_rows=10).decode(reqs, seed=0)
        ref = reference_decode(tiny_lm.model, tiny_lm.tokenizer, reqs, sampling, seed=0)
    pairs = [(c[0].text, r[0].text) for c, r in zip(core, ref)]
    closed = [p for p in pairs if p[1] is not None]
    assert len(closed) >= len(pairs) // 3, "the test needs closed outputs to compare"
    same = sum(c == r for c, r in pairs)
    assert same / len(pairs) >= 0.95
