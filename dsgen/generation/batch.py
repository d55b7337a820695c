"""The active batch of the decode loop: rows of many groups in preallocated slots, their KV cache,
and the invariant that keeps them consistent.

Layout: the batch owns, per layer, key and value buffers of ``[max_rows, H, columns, D]``
allocated once, an attention mask ``[max_rows, columns]`` and per-row positions. Column ``w`` is
where the next token of every row is written; a row's cached tokens sit right-aligned before it,
and its mask is 1 exactly there. Rows live in *slots*: an admitted prompt is copied into a free
slot (the lowest one), a finished row just frees its slot (its mask goes to 0). So a decode step
writes one column in place instead of rebuilding the cache, and retiring a group copies nothing.
Only rows ``[0, used)`` are forwarded; when many of them are free, live rows move to the front;
when ``w`` reaches the last column, live columns move to the left. The invariant, checked after
every change: the mask has ``used`` rows and ``w`` columns in use, every live row attends to its
last written column, every free row attends to nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dsgen.generation.forward import forward_last, pad_id, tokenize

SPARE_COLUMNS = 32  # columns beyond the longest row: how often live columns move left


class PromptBank:
    """Every distinct prompt of a decode call, prefilled once (the counter prompt of a label is the
    main prompt of another label for the same input, so most prompts are shared).

    Prompts are run in batches of similar token length (sorted by length, then by first
    appearance), an order that depends on nothing but the prompts themselves. The bank keeps, per
    layer, one ``[P, H, width, D]`` key and value tensor with each prompt right-aligned (zeros
    before it; ``width`` is the longest prompt), and the next-token logits ``[P, V]``, so that
    admitting any set of prompts into the batch is one copy per layer.
    """

    def __init__(self, model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 32) -> None:
        import torch

        distinct = list(dict.fromkeys(prompts))
        ids = tokenize(tokenizer, distinct) if distinct else []
        self.index = {p: i for i, p in enumerate(distinct)}
        self.lengths = [len(t) for t in ids]
        self.width = max(self.lengths, default=0)
        order = sorted(range(len(distinct)), key=lambda i: (self.lengths[i], i))
        pad = pad_id(tokenizer)
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.logits: Any = None
        self.forward_tokens = 0
        self.batches = 0
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            out = forward_last(model, [ids[i] for i in rows], pad, use_cache=True)
            self.forward_tokens += sum(out.lengths)
            self.batches += 1
            if self.logits is None:
                self._allocate(len(distinct), out)
            at = torch.tensor(rows, dtype=torch.long, device=out.logits.device)
            # a pad position's K/V is whatever the model made of a masked token: zeros instead
            real = torch.arange(out.width, device=at.device)[None, :] >= out.width - torch.tensor(out.lengths, device=at.device)[:, None]
            real = real[:, None, :, None]
            for bank, layer in ((self.keys, out.keys), (self.values, out.values)):
                for b, x in zip(bank, layer):
                    b[at, :, self.width - out.width:] = torch.where(real, x, 0)
            self.logits[at] = out.logits
            del out

    def _allocate(self, n: int, out: Any) -> None:
        import torch

        shape = lambda t: (n, t.shape[1], self.width, t.shape[-1])  # noqa: E731
        self.keys = [torch.zeros(shape(k), dtype=k.dtype, device=k.device) for k in out.keys]
        self.values = [torch.zeros(shape(v), dtype=v.dtype, device=v.device) for v in out.values]
        self.logits = torch.zeros((n, out.logits.shape[-1]), dtype=out.logits.dtype, device=out.logits.device)


def _cache_classes() -> tuple[type, type]:
    """A transformers cache whose layers write each new column into the batch's buffers in place."""
    from transformers.cache_utils import Cache, DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, keys: Any, values: Any, rows: int, width: int) -> None:
            super().__init__()
            self.kbuf, self.vbuf, self.rows, self.width = keys, values, rows, width
            self.dtype, self.device = keys.dtype, keys.device
            self.keys, self.values = keys[:rows, :, :width], values[:rows, :, :width]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            w = self.width
            self.kbuf[:self.rows, :, w:w + 1] = key_states
            self.vbuf[:self.rows, :, w:w + 1] = value_states
            self.width = w + 1
            self.keys, self.values = self.kbuf[:self.rows, :, :w + 1], self.vbuf[:self.rows, :, :w + 1]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.width

        def get_mask_sizes(self, query_length: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
            return self.width + query_length, 0

    class BufferCache(Cache):
        def __init__(self, keys: list[Any], values: list[Any], rows: int, width: int) -> None:
            super().__init__(layers=[BufferLayer(k, v, rows, width) for k, v in zip(keys, values)])

    return BufferLayer, BufferCache


class ActiveBatch:
    """Rows being decoded, in slots of preallocated buffers (see the module docstring).

    Args:
        model: the causal LM (its forward is called by :meth:`advance`).
        device: where the tensors live.
        max_rows: slots.
        max_columns: the longest a row gets (longest prompt + new tokens); buffers hold a few more.
        first_column: the first write column (the longest prompt, so every prompt fits before it).
        spare_columns: columns beyond the longest row; every that many steps, live columns move left.
    """

    def __init__(self, model: Any, device: Any, max_rows: int, max_columns: int, first_column: int,
                 spare_columns: int = SPARE_COLUMNS) -> None:
        self.model = model
        self.device = device
        self.max_rows = max_rows
        self.columns = max_columns + max(1, spare_columns)
        self.first_column = first_column
        self.w = first_column
        self.used = 0
        self.free: list[int] = []
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.mask: Any = None
        self.pos: Any = None
        self.logits: Any = None
        self._cache_cls = _cache_classes()[1]
        self.events = {"joined_running_batch": 0, "row_moves": 0, "column_moves": 0}

    @property
    def rows(self) -> int:
        """Rows forwarded per step (live and free slots below the highest live one)."""
        return self.used

    @property
    def live(self) -> int:
        return self.used - len(self.free)

    def _allocate(self, bank: PromptBank) -> None:
        import torch

        shape = lambda t: (self.max_rows, t.shape[1], self.columns, t.shape[-1])  # noqa: E731
        # not zeroed here (tens of MB per layer): a column is written before any row attends to it,
        # and :meth:`admit` zeroes what an admitted row's masked columns hold before its prompt
        self.keys = [torch.empty(shape(k), dtype=k.dtype, device=self.device) for k in bank.keys]
        self.values = [torch.empty(shape(v), dtype=v.dtype, device=self.device) for v in bank.values]
        self.mask = torch.zeros((self.max_rows, self.columns), dtype=torch.long, device=self.device)
        self.pos = torch.zeros(self.max_rows, dtype=torch.long, device=self.device)
        self.logits = torch.zeros((self.max_rows, bank.logits.shape[-1]), dtype=torch.float32, device=self.device)

    def check(self) -> None:
        """The invariant: live rows attend to their last written column, free rows to nothing, and
        every layer's buffers have the mask's shape."""
        if self.mask is None:
            return
        bad = [i for i, (k, v) in enumerate(zip(self.keys, self.values))
               if k.shape[0] != self.mask.shape[0] or k.shape[2] != self.mask.shape[1] or v.shape[:3] != k.shape[:3]]
        free = sorted(self.free)
        free_set = set(free)
        live = [r for r in range(self.used) if r not in free_set]
        attends_last = self.mask[live, self.w - 1].bool().all() if live else True
        free_empty = not self.mask[free].any() if free else True
        if bad or not attends_last or not free_empty or self.w > self.columns or self.used > self.max_rows:
            raise RuntimeError(f"decode batch out of step: {self.used} rows ({len(free)} free), width {self.w} of "
                               f"{self.columns}, layer {bad[:1]} shape mismatch, live rows attend to their last column: "
                               f"{bool(attends_last)}, free rows attend to nothing: {bool(free_empty)}")

    def admit(self, bank: PromptBank, prompts: Sequence[str]) -> list[int]:
        """Copy prefilled prompts of ``bank`` into free slots (right-aligned before column ``w``; the
        lowest free slot first); return the slots. One copy per layer for all of them."""
        import heapq

        import torch

        if not prompts:
            return []
        if self.mask is None:
            self._allocate(bank)
        if self.live:
            self.events["joined_running_batch"] += len(prompts)
        slots = []
        for _ in prompts:
            if self.free:
                slots.append(heapq.heappop(self.free))
            else:
                slots.append(self.used)
                self.used += 1
        rows = torch.tensor(slots, dtype=torch.long, device=self.device)
        entries = [bank.index[p] for p in prompts]
        at = torch.tensor(entries, dtype=torch.long, device=self.device)
        lo = self.w - bank.width
        for buf, src in zip((*self.keys, *self.values), (*bank.keys, *bank.values)):
            buf[rows, :, lo:self.w] = src.index_select(0, at)
            if lo:  # masked, but read by attention: finite (0 x NaN would be NaN)
                buf[rows, :, :lo] = 0
        lengths = torch.tensor([bank.lengths[i] for i in entries], dtype=torch.long, device=self.device)
        columns = torch.arange(self.columns, device=self.device)[None, :]
        self.mask[rows] = ((columns >= self.w - lengths[:, None]) & (columns < self.w)).long()
        self.pos[rows] = lengths
        self.logits[rows] = bank.logits.index_select(0, at)
        self.check()
        return slots

    def release(self, slots: Sequence[int]) -> dict[int, int]:
        """Free the slots of finished rows; return how surviving rows moved (old slot -> new slot)
        when so many slots were free that the live rows were packed to the front."""
        import heapq

        for s in slots:
            self.mask[s] = 0
            heapq.heappush(self.free, s)
        while self.used and self.free and max(self.free) == self.used - 1:  # drop free slots at the top
            self.free.remove(self.used - 1)
            heapq.heapify(self.free)
            self.used -= 1
        moved: dict[int, int] = {}
        if self.free and len(self.free) * 4 > self.used:
            moved = self._pack_rows()
        self.check()
        return moved

    def _pack_rows(self) -> dict[int, int]:
        import torch

        free = set(self.free)
        live = [r for r in range(self.used) if r not in free]
        index = torch.tensor(live, dtype=torch.long, device=self.device)
        n = len(live)
        for buf in (*self.keys, *self.values):  # columns from w on are written before they are read
            buf[:n, :, :self.w] = buf[:, :, :self.w].index_select(0, index)
        for t in (self.mask, self.pos, self.logits):
            t[:n] = t.index_select(0, index)
        self.mask[n:self.used] = 0
        self.used, self.free = n, []
        self.events["row_moves"] += n
        return {old: new for new, old in enumerate(live) if old != new}

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
        """Feed one token per forwarded row (``[used]``, anything for free slots); write the new column
        in place and keep the next-token logits."""
        if self.w >= self.columns:
            self._move_columns_left()
        used, w = self.used, self.w
        self.mask[:used, w] = 1  # every row attends to its new token (a free row to that alone: no empty softmax)
        cache = self._cache_cls(self.keys, self.values, used, w)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask[:used, :w + 1],
                         position_ids=self.pos[:used, None], past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.logits[:used] = out.logits[:, -1].float()
        if self.free:
            self.mask[sorted(self.free), w] = 0
        self.w = w + 1
        self.pos[:used] += 1
        self.check()
