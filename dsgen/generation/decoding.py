"""The self-debiasing decode loop over a causal LM with a KV cache.

Written by hand because no library offers it: Hugging Face ``generate`` samples every row
on its own, while self-debiasing (Schick et al., 2021; DINO, Schick & Schütze, 2021) needs
each counter-instruction row to be continued with the token sampled for its main row.

A *group* is one sample: one main row (the instruction of label y) plus one row per
counter label y' in CL(y), all fed the same tokens. At every step

    p   = softmax over the main row
    p_c = max over the counter rows of their softmax
    p'  = p * max(exp(-lambda * max(p_c - p, 0)), eps), renormalised

then top-k and top-p filter p' and one token is drawn (:class:`~dsgen.generation.sampling.TokenSampler`).
A group ends at the first closing quotation mark in its decoded text, at an end-of-text token
when those are not suppressed, or after ``max_new_tokens`` (:class:`~dsgen.generation.outputs.OutputRules`).
Many groups are decoded together (:class:`ActiveBatch`): finished groups leave the batch and queued
groups take their place, so compute goes to unfinished rows. Every distinct prompt is prefilled
once (:class:`PromptBank`). Both are handed the numerics this machine's probe chose for the model
(:func:`dsgen.generation.invariance.numerics`, asked before either is built).

The loop reads as a schedule: admit, sample, retire, advance. DINO's original schedule, the
baseline it is checked against, is :mod:`dsgen.generation.reference`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsgen.generation.batch import ActiveBatch, PromptBank
from dsgen.generation.forward import check_fits_window
from dsgen.generation.invariance import numerics
from dsgen.generation.outputs import DecodeOutput, DecodeRequest, OutputRules
from dsgen.generation.probed import Numerics
from dsgen.generation.sampling import SamplingConfig, TokenSampler
from dsgen.heap import heap_frozen


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


def _layout(groups: list["_Group"], device: Any) -> tuple[Any, Any, Any, Any]:
    """(main rows, counter rows, the group of each counter row, copies) as index tensors for the sampler, for the
    distinct groups: groups that hold the same rows (samples of one item whose tokens agree so far) have the same
    distribution, computed once; ``copies`` says which distinct group each group is (None where all differ). A row
    shared by groups that differ appears once per group."""
    import torch

    distinct: dict[tuple[int, ...], int] = {}
    copies = [distinct.setdefault(tuple(g.slots), len(distinct)) for g in groups]
    keys = list(distinct)
    counters = [(s, gi) for gi, slots in enumerate(keys) for s in slots[1:]]
    return (torch.tensor([slots[0] for slots in keys], dtype=torch.long, device=device),
            torch.tensor([s for s, _ in counters], dtype=torch.long, device=device),
            torch.tensor([gi for _, gi in counters], dtype=torch.long, device=device),
            None if len(keys) == len(groups) else torch.tensor(copies, dtype=torch.long, device=device))


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
        self.stats = {"forward_rows": 0, "prefill_tokens": 0, "prefill_rows": 0, "unshared_rows": 0, "steps": 0,
                      "prefill_batches": 0, "prefill_suffix_batches": 0}
        self.numerics: Numerics | None = None  # what this machine's probe chose for the model (set by the first decode)

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

        with torch.inference_mode(), heap_frozen():  # a full collection skips the model's objects
            return self._decode(requests, seed, on_group_done)

    def _decode(self, requests: Sequence[DecodeRequest], seed: int,
                on_group_done: Callable[[DecodeOutput], None] | None) -> list[list[DecodeOutput]]:
        self.numerics = numerics(self.model)  # probed here on the model's first decode, before any batch is built
        schedule = _Schedule(self, requests, seed, on_group_done)
        outputs = schedule.run()
        for k, v in schedule.batch.events.items():
            self.stats[k] = self.stats.get(k, 0) + v
        return outputs


class _Schedule:
    """One call of :meth:`DebiasedDecoder.decode`: the queue of groups, the active batch, and the loop
    that reads as its five steps: :meth:`admit`, :meth:`sample`, :meth:`retire`,
    :meth:`continue_rows`, :meth:`forward`.

    Host-device synchronisation: one device-to-host copy per step of the loop's own, the sampled tokens
    with their log-probabilities and stop flags, which decide which groups end, and one host-to-device
    copy of the small index tensors (rows of each group, token of each row). The sampler adds a few reads
    of sizes per block of 16 groups (``torch.unique`` and masked selections, whose sizes depend on the
    data), the model's own forward (transformers' attention-mask preparation) may add its own, and the
    batch's invariant is checked on a CPU only (:meth:`~dsgen.generation.batch.ActiveBatch.check`). Not
    measured on a GPU.
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
                               [p for r in requests for p in (r.prompt, *r.counter_prompts)], decoder.prefill_batch,
                               numerics=decoder.numerics)
        check_fits_window(decoder.model, self.bank.width, decoder.sampling.max_new_tokens)
        stats = decoder.stats
        stats["forward_rows"] += self.bank.forward_tokens
        stats["prefill_tokens"] += self.bank.forward_tokens
        stats["prefill_rows"] += self.bank.forward_rows
        stats["prefill_batches"] += self.bank.batches
        stats["prefill_suffix_batches"] = stats.get("prefill_suffix_batches", 0) + self.bank.suffix_batches
        self.queue: deque[_Group] = deque()
        for item in self.items:
            self._enqueue_round(item)
        self.batch = ActiveBatch(decoder.model, decoder.device,
                                 decoder.max_rows + max(len(r.counter_prompts) + 1 for r in requests),
                                 self.bank.width + decoder.sampling.max_new_tokens, self.bank.width,
                                 decoder.spare_columns, numerics=decoder.numerics)
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


__all__ = ["DebiasedDecoder"]
