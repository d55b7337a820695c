"""The active batch of the decode loop: rows of many groups, their KV cache, and the invariant that
keeps them consistent.

Layout: row ``r`` of the batch holds one sequence (a main or a counter row of some group). Its
cached keys and values sit right-aligned in ``[R, H, W, D]`` tensors (one per layer) with a
``[R, W]`` attention mask that is 1 on its real positions; ``pos[r]`` is the position of its
next token. Admitting groups pads either the new rows or the old ones on the left to a common
width; retiring groups drops their rows and then the leading columns no remaining row attends
to. The invariant, checked after every change: every layer's keys and values have ``W``
columns and ``R`` rows, as the mask does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsgen.generation.forward import cache_layers, forward_last, pad_id, tokenize


@dataclass
class Prefilled:
    """One prompt run once: its cache (per layer ``[H, L, D]``) and next-token logits."""

    keys: list[Any]
    values: list[Any]
    logits: Any
    length: int


class PromptBank:
    """Every distinct prompt of a decode call, prefilled once (the counter prompt of a label is the
    main prompt of another label for the same input, so most prompts are shared).

    Prompts are run in batches of similar token length (sorted by length, then by first
    appearance), an order that depends on nothing but the prompts themselves.
    """

    def __init__(self, model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 32) -> None:
        distinct = list(dict.fromkeys(prompts))
        ids = dict(zip(distinct, tokenize(tokenizer, distinct))) if distinct else {}
        order = sorted(range(len(distinct)), key=lambda i: (len(ids[distinct[i]]), i))
        pad = pad_id(tokenizer)
        self.entries: dict[str, Prefilled] = {}
        self.forward_tokens = 0
        self.batches = 0
        for start in range(0, len(order), batch_size):
            chunk = [distinct[i] for i in order[start:start + batch_size]]
            out = forward_last(model, [ids[p] for p in chunk], pad, use_cache=True)
            self.forward_tokens += sum(out.lengths)
            self.batches += 1
            for i, prompt in enumerate(chunk):
                lo = out.width - out.lengths[i]
                self.entries[prompt] = Prefilled([k[i, :, lo:].clone() for k in out.keys],
                                                 [v[i, :, lo:].clone() for v in out.values],
                                                 out.logits[i].clone(), out.lengths[i])
            del out

    def __getitem__(self, prompt: str) -> Prefilled:
        return self.entries[prompt]

    @property
    def max_length(self) -> int:
        return max((e.length for e in self.entries.values()), default=0)


class ActiveBatch:
    """Rows being decoded, their KV cache, mask, positions and last logits.

    Args:
        model: the causal LM (its forward is called by :meth:`advance`).
        device: where the tensors live.
    """

    def __init__(self, model: Any, device: Any) -> None:
        self.model = model
        self.device = device
        self.keys: list[Any] = []
        self.values: list[Any] = []
        self.mask: Any = None
        self.pos: Any = None
        self.logits: Any = None
        # how often rows joined a running batch and how many leading columns were trimmed
        self.events = {"joined_running_batch": 0, "trimmed_columns": 0}

    @property
    def rows(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[0])

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def check(self) -> None:
        """The invariant: every layer's cache has the batch's rows and the mask's width."""
        if self.mask is None:
            return
        r, w = self.mask.shape
        bad = [i for i, (k, v) in enumerate(zip(self.keys, self.values))
               if k.shape[0] != r or v.shape[0] != r or k.shape[2] != w or v.shape[2] != w]
        if bad or self.pos.shape[0] != r or self.logits.shape[0] != r:
            raise RuntimeError(f"decode batch out of step: mask {tuple(self.mask.shape)}, layer {bad[:1]} keys "
                               f"{tuple(self.keys[bad[0]].shape) if bad else '-'}, {self.pos.shape[0]} positions, "
                               f"{self.logits.shape[0]} logits")

    def admit(self, entries: Sequence[Prefilled]) -> None:
        """Append one row per prefilled prompt (right-aligned at the batch's current width)."""
        import torch
        import torch.nn.functional as F

        if not entries:
            return
        width = max(self.width, max(e.length for e in entries))
        lengths = torch.tensor([e.length for e in entries], device=self.device)
        new_keys = [torch.stack([F.pad(e.keys[layer], (0, 0, width - e.length, 0)) for e in entries])
                    for layer in range(len(entries[0].keys))]
        new_values = [torch.stack([F.pad(e.values[layer], (0, 0, width - e.length, 0)) for e in entries])
                      for layer in range(len(entries[0].values))]
        new_mask = (torch.arange(width, device=self.device)[None, :] >= (width - lengths)[:, None]).long()
        new_logits = torch.stack([e.logits for e in entries])
        if self.mask is None:
            self.keys, self.values, self.mask, self.pos, self.logits = new_keys, new_values, new_mask, lengths, new_logits
        else:
            self.events["joined_running_batch"] += len(entries)
            grow = width - self.width
            self.keys = [torch.cat([F.pad(k, (0, 0, grow, 0)), nk]) for k, nk in zip(self.keys, new_keys)]
            self.values = [torch.cat([F.pad(v, (0, 0, grow, 0)), nv]) for v, nv in zip(self.values, new_values)]
            self.mask = torch.cat([F.pad(self.mask, (grow, 0)), new_mask])
            self.pos = torch.cat([self.pos, lengths])
            self.logits = torch.cat([self.logits, new_logits])
        self.check()

    def keep(self, rows: Any) -> None:
        """Keep only ``rows`` (a long tensor of row indices, in order), then trim unused leading columns."""
        if rows.numel() == 0:
            self.keys, self.values, self.mask, self.pos, self.logits = [], [], None, None, None
            return
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.mask, self.pos, self.logits = (self.mask.index_select(0, rows), self.pos.index_select(0, rows),
                                            self.logits.index_select(0, rows))
        first = int(self.mask.any(0).long().argmax())  # the first column some row attends to
        if first:
            self.events["trimmed_columns"] += first
            self.keys = [k[:, :, first:] for k in self.keys]
            self.values = [v[:, :, first:] for v in self.values]
            self.mask = self.mask[:, first:]
        self.check()

    def advance(self, tokens: Any) -> None:
        """Feed one token per row; the model's logits for the next step replace ``self.logits``."""
        import torch
        from transformers import DynamicCache

        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        cache = DynamicCache(ddp_cache_data=list(zip(self.keys, self.values)), config=self.model.config)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=self.pos[:, None],
                         past_key_values=cache, use_cache=True, logits_to_keep=1)
        self.logits = out.logits[:, -1].float()
        layers = cache_layers(out.past_key_values)
        self.keys, self.values = [k for k, _ in layers], [v for _, v in layers]
        self.pos = self.pos + 1
        self.check()
