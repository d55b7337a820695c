"""The self-debiasing decode loop over a causal LM with a KV cache.

Written by hand because no library offers it: Hugging Face ``generate`` samples every row
on its own, while self-debiasing (Schick et al., 2021; DINO, Schick & Schütze, 2021) needs
each counter-instruction row to be continued with the token sampled for its main row.

A *group* is one sample: one main row (the instruction of label y) plus one row per
counter label y' in CL(y), all fed the same tokens. At every step

    p   = softmax over the main row
    p_c = max over the counter rows of their softmax
    p'  = p * max(exp(-lambda * max(p_c - p, 0)), eps), renormalised

then top-k and top-p filter p' and one token is drawn. A group ends at the first closing
quotation mark in its decoded text, at an end-of-text token when those are not suppressed,
or after ``max_new_tokens``. Many groups are decoded together (:class:`ActiveBatch`):
finished groups leave the batch and queued groups take their place, so compute goes to
unfinished rows. Every distinct prompt is prefilled once (:class:`PromptBank`).

The loop reads as a schedule: admit, sample, retire, advance.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsgen.config import Config
from dsgen.errors import DsgenError
from dsgen.taskspec import OutputFormat
from dsgen.generation.batch import ActiveBatch, PromptBank
from dsgen.generation.forward import cache_arg, forward_last, pad_id, returned_cache, sliding_window, tokenize

QUOTE = '"'


@dataclass
class SamplingConfig(Config):
    """Decoding settings; defaults are DINO's (Schick & Schütze, 2021, Sec. 4).

    Args:
        decay_constant: lambda of self-debiasing; 0 turns it off.
        epsilon: lower bound of the debiasing factor.
        top_k: keep the k most likely tokens (0: off).
        top_p: nucleus sampling mass (1.0: off).
        max_new_tokens: a row that has not closed its quote after this many tokens ends unclosed.
        suppress_eos: never sample an end-of-text token (DINO sets min_length = max_length); when
            False, an end-of-text token ends its group (the output is unclosed).
        stop_at_newline: end a group early at a newline that precedes any quote when newlines are
            not allowed (such an output is discarded anyway); it saves compute, and because a group
            that ends early leaves the batch, it is part of what a seed reproduces.
        temperature: the logits are divided by it before the softmax (DINO: 1; the later methods' own
            settings, e.g. CLAIF's 0.7).
    """

    decay_constant: float = 100.0
    epsilon: float = 0.01
    top_k: int = 5
    top_p: float = 0.9
    max_new_tokens: int = 40
    suppress_eos: bool = True
    stop_at_newline: bool = True
    temperature: float = 1.0


@dataclass(frozen=True)
class DecodeRequest:
    """Ask for ``n`` continuations of ``prompt`` debiased against ``counter_prompts``.

    DINO draws them in one go and keeps what passes its output rules (``max_attempts`` 1);
    with ``max_attempts`` > 1 the outputs still missing are sampled again, up to that many tries.
    """

    prompt: str
    counter_prompts: tuple[str, ...] = ()
    n: int = 1
    max_attempts: int = 1


@dataclass
class DecodeOutput:
    """One sampled continuation.

    ``text`` is the decoded text before the first closing quote (None when none was produced);
    ``accepted`` says whether it passes the output rules (closed, non-empty, no newline unless
    allowed). ``tokens`` are the sampled ids and ``logprobs`` the log-probability of each under
    the distribution it was drawn from (after debiasing, top-k and top-p).
    """

    text: str | None
    raw: str
    tokens: list[int]
    attempt: int
    accepted: bool
    logprobs: list[float] = field(default_factory=list, repr=False)
    reason: str | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def rejected(self) -> str | None:
        """Why the output rules refused it (None: accepted): ``newline`` (a newline before the closing
        quote, which also ends a group early), ``unclosed`` (no end mark), ``empty`` or ``unparsed`` (a
        structured output without all its fields)."""
        return None if self.accepted else self.reason


def self_debias(p_main: Any, p_counter: Any, decay_constant: float, epsilon: float) -> Any:
    """Self-debiasing of next-token distributions (Schick et al., 2021, eq. for alpha).

    Args:
        p_main: ``[G, V]`` probabilities under the main instruction.
        p_counter: ``[G, V]`` maximum probability over the counter instructions (zeros where
            a group has none); used as working memory: its values are overwritten.
    Returns:
        ``[G, V]`` renormalised, debiased probabilities, ``p_main * alpha / sum``, computed in place
        in ``p_counter`` (each in-place step is the same elementwise operation as its out-of-place
        form, so the values are those of the textbook formula; large vocabularies make the saved
        allocations count).
    """
    alpha = p_counter.sub_(p_main).clamp_min_(0.0).mul_(-decay_constant).exp_().clamp_min_(epsilon)
    p = alpha.mul_(p_main)
    return p.div_(p.sum(dim=-1, keepdim=True))


class TokenSampler:
    """Turns the logits of all rows into one token per group (debias, top-k, top-p, draw).

    Shared by the fast loop and the reference loop so that they differ only in scheduling.

    With top-k on (DINO: 5), top-p is applied to the k candidates only and the draw is among
    them: the same distribution as transformers' ``TopKLogitsWarper`` then ``TopPLogitsWarper``
    (which sort the whole vocabulary) at a fraction of the cost, written here because the
    warpers offer no candidate-restricted form. Without top-k (x1 from scratch), the warpers
    filter the full vocabulary.

    Args:
        sampling: :class:`SamplingConfig`.
        blocked: ids never sampled: the end-of-text ids when ``suppress_eos``, and every id a padded
            vocabulary has beyond the tokenizer's (the tokenizer cannot decode them).
        generator: the ``torch.Generator`` that draws.
    """

    BLOCK = 16  # groups whose vocabulary-wide arrays are processed together (see :meth:`sample`)

    def __init__(self, sampling: SamplingConfig, blocked: Sequence[int], generator: Any) -> None:
        from transformers import LogitsProcessorList, TopPLogitsWarper

        self.cfg = sampling
        self.blocked = sorted(set(int(i) for i in blocked))
        self.full_vocab_warpers = LogitsProcessorList([TopPLogitsWarper(top_p=sampling.top_p)] if sampling.top_p < 1.0 else [])
        self.generator = generator
        self._blocked_t: Any = None

    def debiased(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any) -> Any:
        """Debiased next-token probabilities ``[G, V]`` before top-k / top-p.

        Only the rows named in ``main_rows`` and ``counter_rows`` are read (a batch's free slots
        and unused rows cost nothing), and a row named several times (shared by several groups) is
        softmaxed once; every step is row-wise, so a row's values do not depend on which other rows
        are present.
        """
        import torch

        g = main_rows.numel()
        debias = counter_rows.numel() and self.cfg.decay_constant != 0
        rows = torch.cat([main_rows, counter_rows]) if debias else main_rows
        distinct, where = torch.unique(rows, return_inverse=True)
        picked = logits.index_select(0, distinct).float()
        if self.blocked:
            if self._blocked_t is None or self._blocked_t.device != logits.device:
                self._blocked_t = torch.tensor(self.blocked, device=logits.device)
            picked.index_fill_(1, self._blocked_t, -math.inf)
        if self.cfg.temperature != 1.0:
            picked.div_(self.cfg.temperature)
        probs = torch.softmax(picked, dim=-1)
        del picked
        p_main = probs.index_select(0, where[:g])
        if debias:
            p_counter = torch.zeros_like(p_main)
            with warnings.catch_warnings():  # index_reduce_ is flagged "beta" by torch; it is the right op here
                warnings.simplefilter("ignore", UserWarning)
                p_counter.index_reduce_(0, counter_group, probs.index_select(0, where[g:]), "amax")
            p_main = self_debias(p_main, p_counter, self.cfg.decay_constant, self.cfg.epsilon)
        return p_main

    def candidates(self, p: Any) -> tuple[Any, Any]:
        """(probabilities ``[G, C]``, token ids ``[G, C]`` or None for the whole vocabulary) after top-k and top-p."""
        import torch

        k = self.cfg.top_k
        if not k or k <= 0 or k >= p.shape[-1]:
            scores = self.full_vocab_warpers(None, torch.log(p))
            return torch.softmax(scores, dim=-1), None
        vals, idx = torch.topk(p, k, dim=-1)  # descending
        vals = vals / vals.sum(dim=-1, keepdim=True)
        if self.cfg.top_p < 1.0:
            # transformers' TopP: ascending cumulative mass, drop what stays <= 1 - top_p, keep the top token
            cum = vals.flip(-1).cumsum(dim=-1)
            drop = (cum <= 1 - self.cfg.top_p).flip(-1)
            drop[..., 0] = False
            vals = vals.masked_fill(drop, 0.0)
            vals = vals / vals.sum(dim=-1, keepdim=True)
        return vals, idx

    def distribution(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any) -> Any:
        """Debiased, filtered next-token probabilities ``[G, V]`` for the groups."""
        import torch

        p = self.debiased(logits, main_rows, counter_rows, counter_group)
        probs, idx = self.candidates(p)
        return probs if idx is None else torch.zeros_like(p).scatter_(1, idx, probs)

    def sample(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any) -> tuple[Any, Any]:
        """(token per group, its log-probability under the distribution it was drawn from).

        With top-k on, the vocabulary-wide work (softmax, debiasing, top-k) runs on blocks of
        :attr:`BLOCK` groups, whose rows stay in the CPU's cache between its dozen passes; every
        step of it is row-wise, so the candidates are the same bits as in one block. The draw is
        one call over all groups (the generator's stream is consumed as before)."""
        import torch

        g = main_rows.numel()
        if not self.cfg.top_k or self.cfg.top_k <= 0 or g <= self.BLOCK:
            probs, idx = self.candidates(self.debiased(logits, main_rows, counter_rows, counter_group))
        else:
            parts = []
            for start in range(0, g, self.BLOCK):
                stop = min(start + self.BLOCK, g)
                sel = (counter_group >= start) & (counter_group < stop)
                parts.append(self.candidates(self.debiased(logits, main_rows[start:stop], counter_rows[sel],
                                                           counter_group[sel] - start)))
            probs = torch.cat([p for p, _ in parts])
            idx = torch.cat([i for _, i in parts])
        choice = torch.multinomial(probs, 1, generator=self.generator)
        tokens = choice if idx is None else idx.gather(1, choice)
        return tokens.squeeze(1), torch.log(probs.gather(1, choice)).squeeze(1)


class OutputRules:
    """Where a continuation ends and whether it is kept (DINO's ``_process_output``).

    Args:
        tokenizer: decodes sampled ids.
        vocab_size: the model's logits width (may exceed ``len(tokenizer)`` in a padded vocabulary).
        close_quote: the mark that ends an output (``"``, or ``”`` for a spec that opens with ``“``).
        allow_newlines / keep_unclosed: DINO's options (both off by default).
        end_ids: end-of-text ids that end a group when they are not suppressed.
    """

    def __init__(self, tokenizer: Any, vocab_size: int | None = None, close_quote: str = QUOTE,
                 allow_newlines: bool = False, keep_unclosed: bool = False, end_ids: Sequence[int] = (),
                 output: OutputFormat | None = None) -> None:
        import torch

        self.tokenizer = tokenizer
        self.output = output or OutputFormat(end=close_quote)
        self.close_quote = self.output.end
        self.allow_newlines = allow_newlines or self.output.structured  # a structured output spans lines
        self.keep_unclosed = keep_unclosed
        n_tok = len(tokenizer)
        self.vocab_size = max(vocab_size or n_tok, n_tok)
        pieces = tokenizer.batch_decode([[i] for i in range(n_tok)])
        # A token "may end the text" when its own text holds the closing quote or a newline; only then
        # is the whole sequence decoded again (a token such as '."' carries text before the quote).
        pad = [False] * (self.vocab_size - n_tok)
        mark = self.close_quote[-1]  # the end mark's last character: only such a token can complete it
        self.quote_tokens = torch.tensor([mark in p for p in pieces] + pad, dtype=torch.bool)
        self.newline_tokens = torch.tensor(["\n" in p for p in pieces] + pad, dtype=torch.bool)
        # the end-of-text ids the logits have (a tokenizer may declare one beyond the model's vocabulary)
        self.end_ids = sorted({int(i) for i in end_ids if 0 <= int(i) < self.vocab_size})
        self.end_tokens = torch.zeros(self.vocab_size, dtype=torch.bool)
        self.end_tokens[self.end_ids] = True
        self.beyond_tokenizer = list(range(n_tok, self.vocab_size))

    def blocked(self, suppress_eos: bool) -> list[int]:
        """Ids never sampled: the end-of-text ids when suppressed, and every id a padded vocabulary has
        beyond the tokenizer's (the tokenizer cannot decode them)."""
        return (self.end_ids if suppress_eos else []) + self.beyond_tokenizer

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)

    def judge(self, raw: str) -> tuple[str | None, str | None]:
        """Return (text before the end mark or None, why it is rejected or None when accepted): the
        task spec's rule (:meth:`dsgen.taskspec.OutputFormat.judge`), which every generator applies."""
        return self.output.judge(raw, self.allow_newlines, self.keep_unclosed)


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


@dataclass
class _Item:
    request: DecodeRequest
    outputs: list[DecodeOutput] = field(default_factory=list)
    accepted: int = 0
    attempt: int = 0
    outstanding: int = 0


@dataclass
class _Group:
    item: _Item
    prompts: tuple[str, ...]  # main prompt first
    attempt: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    slots: list[int] = field(default_factory=list)  # its rows in the batch, main row first


def _layout(groups: list["_Group"], device: Any) -> tuple[Any, Any, Any]:
    """(main rows, counter rows, the group of each counter row) as index tensors for the sampler;
    a row shared by several groups appears once per group."""
    import torch

    counters = [(s, gi) for gi, g in enumerate(groups) for s in g.slots[1:]]
    return (torch.tensor([g.slots[0] for g in groups], dtype=torch.long, device=device),
            torch.tensor([s for s, _ in counters], dtype=torch.long, device=device),
            torch.tensor([gi for _, gi in counters], dtype=torch.long, device=device))


class DebiasedDecoder:
    """Batched self-debiasing decoding with admission, shared rows and compaction.

    Rows are shared: every sequence (a prompt and the tokens fed after it) is forwarded once per
    step, however many groups hold it as their main or counter row. The samples of one (x1, label)
    start from one row per prompt, and the counter prompt of a label is the main prompt of another
    label for the same x1, so one x1 of ``sts-x2`` starts 30 groups' rows from 3 sequences; a row
    is forked when the tokens of the groups holding it differ. Because the decode step is
    batch-invariant (:mod:`dsgen.generation.decode_step`), sharing changes no output: the groups,
    their order and the draws are those of the unshared schedule, and every logit is the same bits.

    Args:
        model: a causal LM (``transformers`` ``AutoModelForCausalLM``), already on its device.
        tokenizer: its tokenizer (any padding side: padding is done by :mod:`dsgen.generation.forward`).
        sampling: :class:`SamplingConfig`.
        max_rows: most sequences (main + counter rows) decoded at once, counted as if no row were
            shared (so the schedule, and with it every output, does not depend on sharing).
        rules: :class:`OutputRules` (default: DINO's, closing quote ``"``).
        end_ids: the model's end-of-text ids (suppressed, or ending a group when ``suppress_eos`` is off),
            when ``rules`` is not given (the rules hold the one filtered list: ``end_ids`` reads it).
        prefill_batch: prompts prefilled together.
        spare_columns: cache columns beyond the longest row (:class:`ActiveBatch`): memory against how
            often live columns move left.
        share_rows: forward each distinct sequence once (False: one row per group and prompt, for
            benchmarks and equivalence tests; the outputs are the same). Rows are shared only where
            the machine's probe found sharing exact (:func:`dsgen.generation.invariance.numerics`).

    Example:
        >>> dec = DebiasedDecoder(lm.model, lm.tokenizer, SamplingConfig(), end_ids=lm.end_ids())  # doctest: +SKIP
        >>> outs = dec.decode([DecodeRequest('Sentence 2: "', n=2)], seed=1)                      # doctest: +SKIP
    """

    def __init__(self, model: Any, tokenizer: Any, sampling: SamplingConfig | None = None, max_rows: int = 128,
                 rules: OutputRules | None = None, end_ids: Sequence[int] | None = None, prefill_batch: int = 32,
                 spare_columns: int = 32, share_rows: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.max_rows = max_rows
        self.prefill_batch = prefill_batch
        self.spare_columns = spare_columns
        self.share_rows = share_rows
        if rules is None:
            if end_ids is None:
                from dsgen.models import end_of_text_ids

                end_ids = end_of_text_ids(model, tokenizer)
            head = model.get_output_embeddings()
            vocab = int(head.weight.shape[0]) if head is not None else None
            rules = OutputRules(tokenizer, vocab, end_ids=end_ids)
        self.rules = rules  # holds the one filtered list of end-of-text ids (``rules.end_ids``)
        self.device = next(model.parameters()).device
        self.stats = {"forward_rows": 0, "prefill_tokens": 0, "unshared_rows": 0, "steps": 0, "prefill_batches": 0,
                      "prefill_suffix_batches": 0}
        self.numerics: Any = None  # what this machine's probe chose for the model (set by the first decode)

    def blocked_ids(self) -> list[int]:
        return self.rules.blocked(self.sampling.suppress_eos)

    @property
    def end_ids(self) -> list[int]:
        """The end-of-text ids the logits have (filtered once, by :class:`OutputRules`)."""
        return self.rules.end_ids

    @property
    def newline_stops(self) -> bool:
        """Whether a newline before any quote ends a group (only when newlines disqualify the output)."""
        return self.sampling.stop_at_newline and not self.rules.allow_newlines

    def stop_tokens(self) -> Any:
        """Ids after which a group may have ended (then its text is decoded and checked)."""
        stop = self.rules.quote_tokens.clone()
        if self.newline_stops:
            stop |= self.rules.newline_tokens
        if not self.sampling.suppress_eos:
            stop |= self.rules.end_tokens
        return stop.to(self.device)

    def decode(self, requests: Sequence[DecodeRequest], seed: int = 0,
               on_group_done: Callable[[DecodeOutput], None] | None = None) -> list[list[DecodeOutput]]:
        """Decode every request; returns, per request, all sampled outputs in attempt order."""
        import torch

        with torch.inference_mode():
            return self._decode(requests, seed, on_group_done)

    def _decode(self, requests: Sequence[DecodeRequest], seed: int,
                on_group_done: Callable[[DecodeOutput], None] | None) -> list[list[DecodeOutput]]:
        from dsgen.generation.invariance import numerics

        self.numerics = numerics(self.model)
        schedule = _Schedule(self, requests, seed, on_group_done)
        outputs = schedule.run()
        for k, v in schedule.batch.events.items():
            self.stats[k] = self.stats.get(k, 0) + v
        return outputs


class _Schedule:
    """One call of :meth:`DebiasedDecoder.decode`: the queue of groups, the active batch, and the loop
    that reads as its five steps: :meth:`admit`, :meth:`sample`, :meth:`retire`,
    :meth:`continue_rows`, :meth:`forward`.

    Host-device synchronisation (checked): one device-to-host copy per step, of the sampled tokens
    with their log-probabilities and stop flags, which decide which groups end, and one host-to-device
    copy of the small index tensors (rows of each group, token of each row). The model's own forward
    (transformers' attention-mask preparation) may add its own.
    """

    def __init__(self, decoder: DebiasedDecoder, requests: Sequence[DecodeRequest], seed: int,
                 on_group_done: Callable[[DecodeOutput], None] | None) -> None:
        import torch

        self.dec = decoder
        self.on_group_done = on_group_done
        # sharing rows is exact only where the machine's probe says so; elsewhere every group keeps its own rows
        self.share_rows = decoder.share_rows and decoder.numerics.shared
        gen = torch.Generator(device=decoder.device)
        gen.manual_seed(seed)
        self.sampler = TokenSampler(decoder.sampling, decoder.blocked_ids(), gen)
        self.stop_tok = decoder.stop_tokens()
        self.items = [_Item(r) for r in requests]
        self.bank = PromptBank(decoder.model, decoder.tokenizer,
                               [p for r in requests for p in (r.prompt, *r.counter_prompts)], decoder.prefill_batch)
        check_fits_window(decoder.model, self.bank.width, decoder.sampling.max_new_tokens)
        stats = decoder.stats
        stats["forward_rows"] += self.bank.forward_tokens
        stats["prefill_tokens"] += self.bank.forward_tokens
        stats["prefill_batches"] += self.bank.batches
        stats["prefill_suffix_batches"] = stats.get("prefill_suffix_batches", 0) + self.bank.suffix_batches
        self.queue: deque[_Group] = deque()
        for item in self.items:
            self._enqueue_round(item)
        self.batch = ActiveBatch(decoder.model, decoder.device,
                                 decoder.max_rows + max(len(r.counter_prompts) + 1 for r in requests),
                                 self.bank.width + decoder.sampling.max_new_tokens, self.bank.width,
                                 decoder.spare_columns)
        self.groups: list[_Group] = []
        self.budget = 0  # rows the groups would use unshared: admission counts these, so sharing leaves the schedule alone
        self.fresh: dict[str, int] = {}  # prompt -> its row admitted this step (no token fed yet), shared by new groups

    def run(self) -> list[list[DecodeOutput]]:
        while self.queue or self.groups:
            self.admit()
            survivors, ended = self.retire(*self.sample())
            if not self.groups:
                self.batch.release(sorted({s for g in ended for s in g.slots}))
                self.fresh.clear()
                continue
            self.forward(self.continue_rows(survivors, ended))
        return [it.outputs for it in self.items]

    def _enqueue_round(self, item: _Item) -> None:
        """Queue a group for every output of ``item`` still missing, while tries remain."""
        missing = item.request.n - item.accepted
        if missing <= 0 or item.attempt >= item.request.max_attempts:
            return
        item.attempt += 1
        item.outstanding += missing
        prompts = (item.request.prompt, *item.request.counter_prompts)
        self.queue.extend(_Group(item, prompts, item.attempt) for _ in range(missing))

    def _finish(self, group: _Group, raw: str) -> None:
        text, reason = self.dec.rules.judge(raw)
        ok = reason is None
        out = DecodeOutput(text, raw, group.tokens, group.attempt, ok, group.logprobs, reason)
        item = group.item
        item.outputs.append(out)
        item.accepted += int(ok)
        item.outstanding -= 1
        if self.on_group_done is not None:
            self.on_group_done(out)
        if item.outstanding == 0:
            self._enqueue_round(item)

    def admit(self) -> None:
        """1. Admit queued groups while the row budget allows (always at least one group)."""
        admitted: list[_Group] = []
        max_rows = self.dec.max_rows
        while self.queue and (self.budget + len(self.queue[0].prompts) <= max_rows or not (self.groups or admitted)):
            admitted.append(self.queue.popleft())
            self.budget += len(admitted[-1].prompts)
        if not admitted:
            return
        wanted = [p for g in admitted for p in g.prompts]
        if self.share_rows:
            new = [p for p in dict.fromkeys(wanted) if p not in self.fresh]
            self.fresh.update(zip(new, self.batch.admit(self.bank, new)))
            for g in admitted:
                g.slots = [self.fresh[p] for p in g.prompts]
        else:
            slots = self.batch.admit(self.bank, wanted)
            for g in admitted:
                g.slots, slots = slots[:len(g.prompts)], slots[len(g.prompts):]
        self.groups += admitted

    def sample(self) -> tuple[Any, Any]:
        """2. One token per group, drawn from its debiased distribution (with its log-probability)."""
        self.dec.stats["steps"] += 1
        return self.sampler.sample(self.batch.logits, *_layout(self.groups, self.dec.device))

    def retire(self, tokens: Any, logprobs: Any) -> tuple[list[tuple[_Group, int]], list[_Group]]:
        """3. Record each group's token and retire the groups that ended (their text is decoded only
        when a stop token came); returns (survivors with their token, ended groups)."""
        import torch

        dec = self.dec
        rules, sampling = dec.rules, dec.sampling
        host = torch.stack([tokens.double(), logprobs.double(), self.stop_tok.index_select(0, tokens).double()]).tolist()
        survivors: list[tuple[_Group, int]] = []
        ended: list[_Group] = []
        for gi, g in enumerate(self.groups):
            g.tokens.append(int(host[0][gi]))
            g.logprobs.append(host[1][gi])
            at_limit = len(g.tokens) >= sampling.max_new_tokens
            if not (at_limit or host[2][gi]):
                survivors.append((g, g.tokens[-1]))
                continue
            raw = rules.decode(g.tokens)
            last = g.tokens[-1]
            eos = not sampling.suppress_eos and bool(rules.end_tokens[last])
            if (at_limit or rules.close_quote in raw or eos
                    or (dec.newline_stops and "\n" in raw)):
                if eos and rules.output.structured and rules.close_quote not in raw:
                    raw += rules.close_quote  # a structured answer ends with the model's end of turn, as through an API
                self._finish(g, raw)
                ended.append(g)
                self.budget -= len(g.prompts)
            else:
                survivors.append((g, last))
        self.groups = [g for g, _ in survivors]
        return survivors, ended

    def continue_rows(self, survivors: list[tuple[_Group, int]], ended: list[_Group]) -> list[int]:
        """4. Continue every row with its groups' token: a row whose groups drew different tokens is
        forked, a row no surviving group holds is freed, live rows fill the free slots. Returns the
        token of every used row."""
        batch = self.batch
        child: dict[tuple[int, int], int] = {}  # (row, token) -> the row that continues it
        continued: set[int] = set()
        forks: list[tuple[int, int]] = []
        for g, t in survivors:
            for s in g.slots:
                if (s, t) in child:
                    continue
                if s in continued:
                    forks.append((s, t))
                    child[(s, t)] = -1
                else:
                    continued.add(s)
                    child[(s, t)] = s
        batch.release(sorted({s for g in ended for s in g.slots} - continued))
        child.update(zip(forks, batch.fork([s for s, _ in forks])))
        moved = batch.compact()
        row_tokens = [0] * batch.used
        for (_, t), row in child.items():
            row = moved.get(row, row)
            row_tokens[row] = t
        for g, t in survivors:
            g.slots = [moved.get(child[(s, t)], child[(s, t)]) for s in g.slots]
        self.fresh.clear()
        return row_tokens

    def forward(self, row_tokens: list[int]) -> None:
        """5. One forward step of every row."""
        import torch

        stats = self.dec.stats
        stats["unshared_rows"] += sum(len(g.slots) for g in self.groups)
        stats["forward_rows"] += self.batch.rows
        self.batch.advance(torch.tensor(row_tokens, dtype=torch.long, device=self.dec.device))


def reference_decode(model: Any, tokenizer: Any, requests: Sequence[DecodeRequest],
                     sampling: SamplingConfig | None = None, seed: int = 0, rules: OutputRules | None = None,
                     end_ids: Sequence[int] | None = None) -> list[list[DecodeOutput]]:
    """DINO's original schedule, kept as the baseline for benchmarks and equivalence tests.

    One request at a time: its ``n`` samples and their counter rows decoded together for
    exactly ``max_new_tokens`` steps (DINO sets min_length = max_length), each output cut at
    its first stop (closing quote, or an end-of-text token when those are not suppressed)
    afterwards; a further try for the outputs still missing, up to ``max_attempts``.
    """
    import torch

    sampling = sampling or SamplingConfig()
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    if end_ids is None:
        from dsgen.models import end_of_text_ids

        end_ids = end_of_text_ids(model, tokenizer)
    vocab = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None else None
    rules = rules or OutputRules(tokenizer, vocab, end_ids=end_ids)
    sampler = TokenSampler(sampling, rules.blocked(sampling.suppress_eos), gen)
    pad = pad_id(tokenizer)
    results: list[list[DecodeOutput]] = []
    with torch.inference_mode():
        for req in requests:
            outs: list[DecodeOutput] = []
            accepted = 0
            for attempt in range(1, req.max_attempts + 1):
                n = req.n - accepted
                if n <= 0:
                    break
                # rows: n main rows, then n rows per counter prompt (DINO's layout)
                prompts = [req.prompt] * n + [c for c in req.counter_prompts for _ in range(n)]
                ids = tokenize(tokenizer, prompts)
                check_fits_window(model, max(len(i) for i in ids), sampling.max_new_tokens)
                first = forward_last(model, ids, pad, use_cache=True)
                from transformers import DynamicCache

                cache = DynamicCache(ddp_cache_data=list(zip(first.keys, first.values)), config=model.config)
                logits = first.logits
                mask = torch.ones((len(prompts), first.width), dtype=torch.long, device=dev)
                for i, length in enumerate(first.lengths):
                    mask[i, :first.width - length] = 0
                pos = torch.tensor(first.lengths, device=dev)
                main_rows = torch.arange(n, device=dev)
                counter_rows = torch.arange(n, len(prompts), device=dev)
                counter_group = counter_rows % n
                steps: list[Any] = []
                step_logprobs: list[Any] = []
                for step in range(sampling.max_new_tokens):
                    tok, lp = sampler.sample(logits, main_rows, counter_rows, counter_group)
                    steps.append(tok)
                    step_logprobs.append(lp)
                    if step == sampling.max_new_tokens - 1:
                        break
                    row_tok = tok.repeat(len(prompts) // n)
                    mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
                    out = model(input_ids=row_tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                                **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
                    cache, logits, pos = returned_cache(out), out.logits[:, -1].float(), pos + 1
                seqs = torch.stack(steps, dim=1).tolist()
                lps = torch.stack(step_logprobs, dim=1).tolist()
                for seq, lp in zip(seqs, lps):
                    used = _first_stop(seq, rules, sampling)
                    raw = rules.decode(seq[:used])
                    text, reason = rules.judge(raw)
                    ok = reason is None
                    outs.append(DecodeOutput(text, raw, seq[:used], attempt, ok, lp[:used], reason))
                    accepted += int(ok)
            results.append(outs)
    return results


def same_output(core: DecodeOutput, reference: DecodeOutput) -> bool:
    """Whether the core and :func:`reference_decode` gave the same output (the one comparison that the
    equivalence tests, CPU and GPU, and ``dsgen bench generation`` use): the same kept text (or both
    rejected) and the same tokens. The core stops an output as soon as it is decided, the reference
    only at a closing quote (DINO decodes all 40 tokens), so an output the core ended at a newline (text
    None) is longer there, with the newline in its text: the core's tokens are its start."""
    return (core.accepted == reference.accepted and (core.text == reference.text or not core.accepted)
            and reference.tokens[:len(core.tokens)] == core.tokens
            and (core.tokens == reference.tokens or not core.accepted))


def _first_stop(seq: Sequence[int], rules: OutputRules, sampling: SamplingConfig) -> int:
    """Tokens up to and including the one that ends the output (as the core stops), else all."""
    for i, t in enumerate(seq):
        if not sampling.suppress_eos and bool(rules.end_tokens[t]):
            return i + 1
        if bool(rules.quote_tokens[t]) and rules.close_quote in rules.decode(seq[:i + 1]):
            return i + 1
    return len(seq)


__all__ = ["SamplingConfig", "DecodeRequest", "DecodeOutput", "TokenSampler", "OutputRules", "DebiasedDecoder",
           "reference_decode", "same_output", "self_debias", "check_fits_window"]
