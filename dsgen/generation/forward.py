"""The one left-padded, position-aware batched forward pass of a causal LM.

Prompts of different lengths share a batch only if (a) each is padded on the left, so that
every row's last position is its real last token, and (b) each real token gets the position
it would have alone (0, 1, ... from its first real token). Without (b) a model with absolute
position embeddings (GPT-2) scores a prompt differently depending on what else is in the
batch. Padding is done here, from token ids, so the tokenizer's own ``padding_side`` does not
matter. The decoder's prefill, the DINO-style reference loop and the zero-shot discriminator
all call :func:`forward_last`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def tokenize(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text as the model expects a sequence to start (the tokenizer's special
    tokens, e.g. Gemma's BOS; none for GPT-2 or SmolLM2)."""
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=True)["input_ids"]]


def pad_id(tokenizer: Any) -> int:
    pid = tokenizer.pad_token_id
    if pid is None:
        pid = tokenizer.eos_token_id if isinstance(tokenizer.eos_token_id, int) else 0
    return int(pid)


def left_padded(ids: Sequence[Sequence[int]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """(input_ids, attention_mask, position_ids), each ``[B, max_len]``, padded on the left."""
    import torch

    width = max(len(s) for s in ids)
    input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, s in enumerate(ids):
        if s:
            input_ids[i, width - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, width - len(s):] = 1
    positions = (mask.cumsum(-1) - 1).clamp_min(0)
    return input_ids.to(device), mask.to(device), positions.to(device)


@dataclass
class Forward:
    """Result of :func:`forward_last`: next-token logits per row and, if asked, the cache."""

    logits: Any            # [B, V], float32
    lengths: list[int]     # real tokens per row
    width: int             # padded width
    keys: list[Any] | None = None    # per layer [B, H, width, D] (left-padded), when use_cache
    values: list[Any] | None = None


def forward_last(model: Any, ids: Sequence[Sequence[int]], pad: int, use_cache: bool = False) -> Forward:
    """Run token id sequences of any lengths as one left-padded batch; return the logits of each
    row's last real token (and the per-layer K/V when ``use_cache``)."""
    device = next(model.parameters()).device
    input_ids, mask, positions = left_padded(ids, pad, device)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=use_cache,
                logits_to_keep=1)
    result = Forward(out.logits[:, -1].float(), [len(s) for s in ids], int(mask.shape[1]))
    if use_cache:
        layers = cache_layers(out.past_key_values)
        result.keys = [k for k, _ in layers]
        result.values = [v for _, v in layers]
    return result


def cache_layers(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache object."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def sliding_window(model: Any) -> int | None:
    """The attention window of a model with sliding-window layers (Gemma 2/3, Mistral...), else None."""
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "text_config", None) or cfg
    window = getattr(cfg, "sliding_window", None)
    if not window:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    return int(window)
