"""The active batch of the decode loop: rows of many groups in preallocated slots, their KV cache,
and the invariant that keeps them consistent.

Layout: the batch owns, per layer, key and value buffers of ``[max_rows, H, columns, D]``
allocated once (views of one tensor where every layer's have one shape), an attention mask
``[max_rows, columns]`` and per-row positions. Column ``w`` is where the next token of every row
is written; a row's cached tokens sit right-aligned before it, and its mask is 1 exactly there.
Rows live in *slots*: an admitted prompt is copied into a free slot (the lowest one), a finished
row just frees its slot (its mask goes to 0). So a decode step
writes one column in place instead of rebuilding the cache, and retiring a group copies nothing.
Only rows ``[0, used)`` are forwarded; when many of them are free, live rows move to the front;
when ``w`` reaches the last column, live columns move to the left. The invariant, checked after
every change: the mask has ``used`` rows and ``w`` columns in use, every live row attends to its
last written column, every free row attends to nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsgen.generation.decode_step import blocked_linears, blocked_output_head, invariant_forward
from dsgen.generation.forward import buffer_cache, cache_arg, extend_rows, pad_id, tokenize
from dsgen.generation.probed import Numerics

SPARE_COLUMNS = 32  # columns beyond the longest row: how often live columns move left


MIN_SHARED_PREFIX = 4  # fewest tokens a prefix must have to be computed once for several prompts


def shared_prefixes(ids: Sequence[Sequence[int]]) -> list[int]:
    """For every prompt, how many of its first tokens are computed once for a group of prompts (0: none).

    The prompts of one label differ only after the instruction's head (``Task: Write two sentences
    that mean the same thing. Sentence 1: "``), so that head is worth computing once. Groups are
    runs of prompts in token order whose common prefix is at least ``t`` tokens, for the ``t`` that
    saves the most tokens; a group's prefix stops at least one token before its shortest prompt. A
    function of the prompts alone, in any order.
    """
    def common(a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    order = sorted(range(len(ids)), key=lambda i: (list(ids[i]), i))
    lcp = [common(ids[order[k]], ids[order[k + 1]]) for k in range(len(order) - 1)]
    best: tuple[int, list[int]] = (0, [0] * len(ids))
    for t in sorted({x for x in lcp if x >= MIN_SHARED_PREFIX}):
        shared = [0] * len(ids)
        saved, k = 0, 0
        while k < len(lcp):
            if lcp[k] < t:
                k += 1
                continue
            end = k
            while end < len(lcp) and lcp[end] >= t:
                end += 1
            members = order[k:end + 1]
            p = min(min(lcp[k:end]), min(len(ids[i]) for i in members) - 1)
            if p >= MIN_SHARED_PREFIX:
                for i in members:
                    shared[i] = p
                saved += (len(members) - 1) * p
            k = end
        if saved > best[0]:
            best = (saved, shared)
    return best[1]


def _moves(moves: Sequence[tuple[int, int, int, int]], device: Any) -> Any:
    """``(row, column, row', column')`` moves as a ``[4, N]`` index tensor for :func:`_move` (None: no moves)."""
    import torch

    return torch.tensor(moves, dtype=torch.long, device=device).t() if moves else None


def _move(into: Any, source: Any, at: Any) -> None:
    """``into[row, :, column] = source[row', :, column']`` for every move of ``at`` (:func:`_moves`; between
    ``[rows, H, columns, D]`` tensors), as one indexed copy."""
    if at is not None:
        into[at[0], :, at[1]] = source[at[2], :, at[3]]


class PromptBank:
    """Every distinct prompt of a decode call, prefilled once (the counter prompt of a label is the
    main prompt of another label for the same input, so most prompts are shared).

    The instruction head that many prompts begin with is computed once (:func:`shared_prefixes`)
    and each prompt's remaining tokens are fed after it (:func:`~dsgen.generation.forward.extend_rows`);
    because that forward pass is exact by construction (:mod:`~dsgen.generation.prefill_step`: packed
    prompts, attention prompt by prompt, linear layers in row blocks of one probed size, the last one cut to
    the probed counts), a prompt gets the same bits as if it were run whole and alone, on any CPU. Prompts
    are run in batches of similar length (sorted by length, then by first appearance), an order that
    depends on nothing but the prompts. The bank keeps, per layer, one
    ``[P, H, width, D]`` key and value tensor with each prompt right-aligned (zeros before it;
    ``width`` is the longest prompt), and the next-token logits ``[P, V]``, so that admitting any set
    of prompts into the batch is one copy per layer.

    Args:
        share_prefixes: compute shared prefixes once (False: every prompt whole; the same values);
            None: where this machine's probe found it exact (``numerics.shared``).
        numerics: what this machine's probe chose for ``model``
            (:func:`dsgen.generation.invariance.numerics`): the softmax.
    """

    def __init__(self, model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 32,
                 share_prefixes: bool | None = None, *, numerics: Numerics) -> None:
        import torch

        distinct = list(dict.fromkeys(prompts))
        ids = tokenize(tokenizer, distinct) if distinct else []
        self.index = {p: i for i, p in enumerate(distinct)}
        self.lengths = [len(t) for t in ids]
        self.width = max(self.lengths, default=0)
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.logits: Any = None
        self.forward_tokens = 0
        self.forward_rows = 0  # rows the linear layers multiplied, the zero rows padding their blocks included
        self.batches = 0  # forward passes: prefix batches plus suffix batches
        self.suffix_batches = 0  # forward passes over prompts' own tokens (after their prefix, or whole)
        if not distinct:
            return
        pad = pad_id(tokenizer)
        device = next(model.parameters()).device
        if share_prefixes is None:
            share_prefixes = numerics.shared
        shared = shared_prefixes(ids) if share_prefixes else [0] * len(ids)

        # 1. each shared prefix once; a prefix's keys and values are row ``row`` of its batch's, columns [0, p)
        prefixes = sorted({tuple(ids[i][:shared[i]]) for i in range(len(ids)) if shared[i]}, key=lambda x: (len(x), x))
        prefix_outs: list[Any] = []
        where: dict[tuple[int, ...], tuple[int, int]] = {}  # prefix -> (its batch, its row there)
        for start in range(0, len(prefixes), batch_size):
            part = prefixes[start:start + batch_size]
            out = extend_rows(model, part, pad, numerics=numerics)
            self.forward_tokens += sum(out.lengths)
            self.forward_rows += out.rows
            self.batches += 1
            where.update((prefix, (len(prefix_outs), r)) for r, prefix in enumerate(part))
            prefix_outs.append(out)

        # 2. every prompt's own tokens after its prefix, in batches of similar length. Tokens move between
        # tensors as one indexed copy per layer (index lists built once per batch), not one per prompt
        order = sorted(range(len(ids)), key=lambda i: (self.lengths[i] - shared[i], self.lengths[i], i))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            past_lengths = [shared[i] for i in rows]
            past_k = past_v = None
            wp = max(past_lengths)
            if wp:  # each row's prefix right-aligned in [rows, H, wp, D], from the prefix batches
                found = {r: where[tuple(ids[i][:p])] for r, (i, p) in enumerate(zip(rows, past_lengths)) if p}
                moves = [_moves([(r, wp - past_lengths[r] + j, row, j) for r, (b, row) in found.items() if b == batch
                                 for j in range(past_lengths[r])], device) for batch in range(len(prefix_outs))]
                past_k, past_v = [], []
                for layer, some in enumerate(prefix_outs[0].keys):
                    for into, part in ((past_k, "keys"), (past_v, "values")):
                        buf = some.new_zeros((len(rows), some.shape[1], wp, some.shape[-1]))
                        for b, move in enumerate(moves):
                            _move(buf, getattr(prefix_outs[b], part)[layer], move)
                        into.append(buf)
            out = extend_rows(model, [ids[i][shared[i]:] for i in rows], pad, past_k, past_v, past_lengths,
                              numerics=numerics)
            self.forward_tokens += sum(out.lengths)
            self.forward_rows += out.rows
            self.batches += 1
            self.suffix_batches += 1
            if self.logits is None:
                self._allocate(len(distinct), out)
            # a prompt's own tokens end at the bank's last column, its prefix (from the past) just before them
            own = _moves([(i, self.width - n + t, r, t)
                          for r, (i, n) in enumerate(zip(rows, out.lengths)) for t in range(n)], device)
            before = _moves([(i, self.width - n - p + j, r, wp - p + j) for r, (i, n, p)
                             in enumerate(zip(rows, out.lengths, past_lengths)) for j in range(p)], device)
            for bank, new, past in ((self.keys, out.keys, past_k), (self.values, out.values, past_v)):
                for layer, b in enumerate(bank):
                    _move(b, new[layer], own)
                    if past is not None:
                        _move(b, past[layer], before)
            self.logits[torch.tensor(rows, device=out.logits.device)] = out.logits
            del out

    def _allocate(self, n: int, out: Any) -> None:
        import torch

        shape = lambda t: (n, t.shape[1], self.width, t.shape[-1])  # noqa: E731
        self.keys = [torch.zeros(shape(k), dtype=k.dtype, device=k.device) for k in out.keys]
        self.values = [torch.zeros(shape(v), dtype=v.dtype, device=v.device) for v in out.values]
        self.logits = torch.zeros((n, out.logits.shape[-1]), dtype=out.logits.dtype, device=out.logits.device)


class ActiveBatch:
    """Rows being decoded, in slots of preallocated buffers (see the module docstring).

    Args:
        model: the causal LM (its forward is called by :meth:`advance`).
        device: where the tensors live.
        max_rows: slots (rounded up to a batch-invariant row count, so that any step can be padded
            to one, as probed for the model).
        max_columns: the longest a row gets (longest prompt + new tokens); buffers hold a few more.
        first_column: the first write column (the longest prompt, so every prompt fits before it).
        spare_columns: columns beyond the longest row; every that many steps, live columns move left.
        numerics: what this machine's probe chose for ``model``
            (:func:`dsgen.generation.invariance.numerics`): the row counts and softmax of every step.
    """

    def __init__(self, model: Any, device: Any, max_rows: int, max_columns: int, first_column: int,
                 spare_columns: int = SPARE_COLUMNS, *, numerics: Numerics) -> None:
        self.model = model
        self.device = device
        self.numerics = numerics
        self.max_rows = self.numerics.rows(max_rows)  # room to pad any step to a batch-invariant row count
        self.columns = max_columns + max(1, spare_columns)
        self.first_column = first_column
        self.w = first_column
        self.used = 0
        self.free: list[int] = []
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.stacked: Any = None  # [2 * layers, max_rows, H, columns, D]: every buffer, where they share a shape
        self.mask: Any = None
        self.pos: Any = None
        self.logits: Any = None
        self.events = {"joined_running_batch": 0, "row_moves": 0, "row_forks": 0, "column_moves": 0, "padded_rows": 0}

    @property
    def rows(self) -> int:
        """Rows forwarded per step: the used slots, padded to a batch-invariant count."""
        return min(self.numerics.rows(self.used), self.max_rows) if self.used else 0

    @property
    def live(self) -> int:
        return self.used - len(self.free)

    def _allocate(self, bank: PromptBank) -> None:
        import torch

        sources = (*bank.keys, *bank.values)
        shapes = [(self.max_rows, t.shape[1], self.columns, t.shape[-1]) for t in sources]
        # not zeroed here (tens of MB per layer): a column is written before any row attends to it,
        # :meth:`admit` zeroes what an admitted row's masked columns hold before its prompt, and
        # :meth:`advance` zeroes the padding rows it forwards. Where every layer's keys and values have one
        # shape and dtype (most models), the buffers are views of one tensor, so that a row moves in one copy
        if len(set(shapes)) == 1 and len({t.dtype for t in sources}) == 1:
            self.stacked = torch.empty((len(shapes), *shapes[0]), dtype=sources[0].dtype, device=self.device)
            buffers = list(self.stacked.unbind(0))
        else:
            buffers = [torch.empty(shape, dtype=t.dtype, device=self.device) for shape, t in zip(shapes, sources)]
        self.keys, self.values = buffers[:len(bank.keys)], buffers[len(bank.keys):]
        self.mask = torch.zeros((self.max_rows, self.columns), dtype=torch.long, device=self.device)
        self.pos = torch.zeros(self.max_rows, dtype=torch.long, device=self.device)
        self.logits = torch.zeros((self.max_rows, bank.logits.shape[-1]), dtype=torch.float32, device=self.device)

    def check(self) -> None:
        """The invariant: live rows attend to their last written column, free rows and rows beyond
        the used ones to nothing, and every layer's buffers have the mask's shape. Checked on a CPU, after
        every change of the batch; not on a GPU, where each check would stop the host until the device caught
        up (two or three reads back per call, several calls per step): the bookkeeping is the same code on
        every device, and the CPU runs check it."""
        if self.mask is None or self.mask.device.type != "cpu":
            return
        bad = [i for i, (k, v) in enumerate(zip(self.keys, self.values))
               if k.shape[0] != self.mask.shape[0] or k.shape[2] != self.mask.shape[1] or v.shape[:3] != k.shape[:3]]
        import torch

        free = sorted(self.free)
        live = torch.ones(self.used, dtype=torch.bool, device=self.device)
        live[free] = False
        attends_last = bool(self.mask[:self.used, self.w - 1].bool()[live].all()) if self.used else True
        free_empty = not self.mask[free].any() if free else True
        beyond_empty = not self.mask[self.used:].any()
        if (bad or not attends_last or not free_empty or not beyond_empty or self.w > self.columns
                or self.used > self.max_rows or (free and free[-1] >= self.used)):
            raise RuntimeError(f"decode batch out of step: {self.used} rows ({len(free)} free), width {self.w} of "
                               f"{self.columns}, layer {bad[:1]} shape mismatch, live rows attend to their last column: "
                               f"{attends_last}, free rows attend to nothing: {free_empty}, rows beyond the used "
                               f"ones attend to nothing: {beyond_empty}")

    def _take_slots(self, n: int) -> list[int]:
        """``n`` slots: the lowest free ones first, then new ones at the top."""
        import heapq

        slots = []
        for _ in range(n):
            if self.free:
                slots.append(heapq.heappop(self.free))
            else:
                slots.append(self.used)
                self.used += 1
        if self.used > self.max_rows:
            raise RuntimeError(f"decode batch: {self.used} rows needed, {self.max_rows} slots allocated")
        return slots

    def _copy_rows(self, sources: Sequence[int], targets: Sequence[int]) -> None:
        """Copy whole rows (cached columns, mask, position, logits): one copy per buffer."""
        import torch

        if not sources:
            return
        src = torch.tensor(sources, dtype=torch.long, device=self.device)
        dst = torch.tensor(targets, dtype=torch.long, device=self.device)
        if self.stacked is not None and not set(sources) & set(targets):
            # row by row, every layer at once: one pass over the bytes (a gather, then a scatter, is two)
            for s, t in zip(sources, targets):  # columns from w on are written before they are read
                self.stacked[:, t, :, :self.w].copy_(self.stacked[:, s, :, :self.w])
        else:
            for buf in (*self.keys, *self.values):
                written = buf[:, :, :self.w]
                written.index_copy_(0, dst, written.index_select(0, src))  # 25-40% faster than buf[dst] = buf[src]
        for t in (self.mask, self.pos, self.logits):
            t[dst] = t[src]

    def admit(self, bank: PromptBank, prompts: Sequence[str]) -> list[int]:
        """Copy prefilled prompts of ``bank`` into free slots (right-aligned before column ``w``; the
        lowest free slot first); return the slots. One copy per layer for all of them."""
        import torch

        if not prompts:
            return []
        if self.mask is None:
            self._allocate(bank)
        if self.live:
            self.events["joined_running_batch"] += len(prompts)
        slots = self._take_slots(len(prompts))
        rows = torch.tensor(slots, dtype=torch.long, device=self.device)
        entries = [bank.index[p] for p in prompts]
        at = torch.tensor(entries, dtype=torch.long, device=self.device)
        lo = self.w - bank.width
        for buf, src in zip((*self.keys, *self.values), (*bank.keys, *bank.values)):
            buf[:, :, lo:self.w].index_copy_(0, rows, src.index_select(0, at))
            if lo:  # masked, but read by attention: finite (0 x NaN would be NaN)
                buf[:, :, :lo].index_fill_(0, rows, 0)
        lengths = torch.tensor([bank.lengths[i] for i in entries], dtype=torch.long, device=self.device)
        columns = torch.arange(self.columns, device=self.device)[None, :]
        self.mask[rows] = ((columns >= self.w - lengths[:, None]) & (columns < self.w)).long()
        self.pos[rows] = lengths
        self.logits[rows] = bank.logits.index_select(0, at)
        self.check()
        return slots

    def fork(self, sources: Sequence[int]) -> list[int]:
        """New rows that are copies of ``sources`` (the lowest free slots first); return their slots.

        A row shared by several samples is forked when their next tokens differ."""
        slots = self._take_slots(len(sources))
        self._copy_rows(list(sources), slots)
        self.events["row_forks"] += len(slots)
        self.check()
        return slots

    def release(self, slots: Sequence[int]) -> None:
        """Free the slots of finished rows (free slots at the top are dropped at once)."""
        import heapq

        for s in slots:
            self.mask[s] = 0
            heapq.heappush(self.free, s)
        while self.used and self.free and max(self.free) == self.used - 1:  # drop free slots at the top
            self.free.remove(self.used - 1)
            heapq.heapify(self.free)
            self.used -= 1
        self.check()

    def compact(self) -> dict[int, int]:
        """Move the highest live rows into the free slots below them, so that every forwarded row is
        live; return how rows moved (old slot -> new slot). A move copies one row's cache (about
        4 MB for SmolLM2 at 90 columns), much less than forwarding a free slot at every step."""
        if not self.free:
            return {}
        n = self.live
        holes = sorted(s for s in self.free if s < n)
        free = set(self.free)
        movers = [r for r in range(n, self.used) if r not in free]
        self._copy_rows(movers, holes)
        self.mask[n:self.used] = 0
        self.used, self.free = n, []
        self.events["row_moves"] += len(movers)
        self.check()
        return dict(zip(movers, holes))

    def _move_columns_left(self) -> None:
        """Shift every row's columns left, towards the first column any live row attends to, keeping
        room for the longest prompt before the write column."""
        first = int(self.mask[:self.used].any(0).long().argmax()) if self.live else self.w
        shift = min(first, self.w - self.first_column)
        if shift <= 0:
            raise RuntimeError("decode batch: no free column left; a row is longer than the buffers allow")
        n = self.w - shift
        for buf in (*self.keys, *self.values):
            buf[:self.used, :, :n] = buf[:self.used, :, shift:self.w].clone()
        self.mask[:self.used, :n] = self.mask[:self.used, shift:self.w].clone()
        self.mask[:self.used, n:] = 0
        self.w = n
        self.events["column_moves"] += 1

    def advance(self, tokens: Any) -> None:
        """Feed one token per used row (``[used]``, anything for free slots); write the new column in
        place and keep the next-token logits.

        The step is batch-invariant (:mod:`dsgen.generation.decode_step`): a row's logits are the
        same bits whichever rows share the step, so sharing, forking and moving rows change no output."""
        import torch

        if self.w >= self.columns:
            self._move_columns_left()
        used, rows, w = self.used, self.rows, self.w
        if rows > used:  # padding rows: finite cache, position 0, token 0 (their logits are never read)
            for buf in (*self.keys, *self.values):
                buf[used:rows, :, :w] = 0
            self.pos[used:rows] = 0
            tokens = torch.cat([tokens, tokens.new_zeros(rows - used)])
            self.events["padded_rows"] += rows - used
        self.mask[:rows, w] = 1  # every row attends to its new token (a free row to that alone: no empty softmax)
        attend = self.mask[:rows, :w + 1]
        additive = torch.zeros(attend.shape, dtype=self.keys[0].dtype, device=self.device)
        additive.masked_fill_(attend == 0, torch.finfo(additive.dtype).min)
        cache = buffer_cache(self.keys, self.values, rows, w)
        # rows in batch-invariant blocks: one block where the CPU's large-batch kernel is invariant (MKL on
        # an AMD EPYC), several where only some counts are (an Intel Xeon: 100 rows as 56 + 44)
        blocks, kernels = self.numerics.blocks(used), self.numerics.kernels
        plan = ((lambda n: blocks if n == rows else self.numerics.blocks(n))
                if len(blocks) > 1 or not kernels.own(blocks[0]) else None)
        blocked = (blocked_linears(self.model, plan, out=self.logits, kernels=kernels)
                   if plan is not None else blocked_output_head(self.model, out=self.logits))
        with invariant_forward(self.model, self.numerics.attention), blocked:
            out = self.model(input_ids=tokens[:, None], attention_mask=additive[:, None, None, :],
                             position_ids=self.pos[:rows, None], **cache_arg(self.model, cache), use_cache=True,
                             logits_to_keep=1)
        if out.logits.data_ptr() != self.logits.data_ptr():  # the head wrote elsewhere (not a plain CPU head)
            self.logits[:used] = out.logits[:used, -1].float()
        self.mask[used:rows, w] = 0
        if self.free:
            self.mask[sorted(self.free), w] = 0
        self.w = w + 1
        self.pos[:used] += 1
        self.check()

