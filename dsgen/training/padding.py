"""A training batch's forward without most of its padding: the rows cut into groups of similar length, each
group run trimmed to its own longest row, the sentence embeddings put back in the batch's order.

A training batch is a random draw of sentences (the papers' sampler), tokenised and padded to its longest row. STS
sentences run from 5 to 50 tokens, so a batch of 32 is mostly padding: on ``intro``'s generated and human pairs
(SmolLM2 tokenizer) the padded batch holds 2.4-2.8x the real tokens, and a small encoder's linear layers spend
that on positions the pooling then masks out. :func:`trimmed_padding` leaves the batches as they are drawn and
changes only how one is computed: a right-padded row's real positions never see its padding (the attention mask
keeps it out, position ids count from the first token), so its embedding is the same function of its tokens in
any group (equal up to float rounding: the matrix products have other shapes). The evaluation batches by length
for the same reason (:func:`dsgen.evaluation.evaluator.length_buckets`); there the sentences are known in advance
and the batches are formed from them, here the batch is given and only cut.

Hand-written: sentence-transformers pads each batch to its longest row, and Hugging Face's padding-free
("packed") training needs flash-attention kernels that CPUs and the presets' encoders do not have.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

GROUP_OVERHEAD_TOKENS = 32
"""What one more group costs, in padded token positions: a group is another pass through every module (4-12 layers,
a few dozen kernel calls each, forward and backward) on fewer rows, whose matrix products use the cores less well.
With it, a batch is cut where the padding saved outweighs a pass: a group of a few rows stands alone only if it is
much longer than the rest. Measured on ``smollm2-l4`` (2-core AVX-512 EPYC, 320 STSb train pairs, batch 32, paired
runs): 0 (a group per distinct length) trained 1.5-1.8x slower than 32; 16, 64, 128 and 256 within the runs' noise
of it (``dsgen bench training --overhead N``)."""


def length_groups(lengths: list[int], overhead: int = GROUP_OVERHEAD_TOKENS) -> list[list[int]]:
    """Row indices in groups of similar length: the rows sorted by length (ties by index) and cut where the
    padded positions saved outweigh ``overhead`` per group. The cut is the cheapest one (dynamic programming over
    the sorted rows, cost ``sum(rows x longest row) + overhead`` per group); it depends on the lengths alone."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    n = len(order)
    if n == 0:
        return []
    sorted_lengths = [lengths[i] for i in order]
    # a group ends at a row whose successor is longer (rows of one length always go together)
    ends = [j for j in range(n) if j == n - 1 or sorted_lengths[j + 1] > sorted_lengths[j]]
    best = {-1: (0, -1)}  # cost of the rows up to this end, and the previous cut
    for e in ends:
        best[e] = min((best[s][0] + (e - s) * sorted_lengths[e] + overhead, s) for s in [-1, *ends] if s < e and s in best)
    cuts, e = [], n - 1
    while e >= 0:
        cuts.append(e)
        e = best[e][1]
    groups, start = [], 0
    for end in reversed(cuts):
        groups.append(order[start:end + 1])
        start = end + 1
    return groups


def right_padded_lengths(features: dict[str, Any]) -> list[int] | None:
    """Each row's token count when ``features`` is a right-padded batch (every attention-mask row ones, then
    zeros) whose row tensors all have the mask's shape; None otherwise (left padding, extra row-level inputs),
    which is then run as it is."""
    import torch

    mask = features.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.size(0) < 2:
        return None
    for value in features.values():
        if isinstance(value, torch.Tensor) and value.shape != mask.shape:
            return None
    lengths = mask.sum(1)
    positions = torch.arange(mask.size(1), device=mask.device)
    if not torch.equal(mask.bool(), positions.unsqueeze(0) < lengths.unsqueeze(1)):
        return None
    return [int(n) for n in lengths.tolist()]


def grouped_forward(forward: Any, features: dict[str, Any], overhead: int = GROUP_OVERHEAD_TOKENS) -> dict[str, Any]:
    """``forward(features)`` computed group by group (:func:`length_groups`), each group trimmed to its longest row.

    Returns the input features with the modules' row outputs (``sentence_embedding``; token-level outputs padded
    back to the batch's length with zeros) in the batch's row order. A batch that is not right-padded, or that one
    group covers anyway, runs as one call."""
    import torch

    lengths = right_padded_lengths(features)
    groups = length_groups(lengths, overhead) if lengths else None
    if not groups or len(groups) == 1:
        return forward(features)
    outputs = []
    for group in groups:
        index = torch.tensor(group, device=features["attention_mask"].device)
        longest = max(lengths[i] for i in group)
        part = {k: v.index_select(0, index)[:, :longest] if isinstance(v, torch.Tensor) else v
                for k, v in features.items()}
        outputs.append(forward(part))
    inverse = torch.empty(len(lengths), dtype=torch.long)
    inverse[torch.tensor([i for group in groups for i in group])] = torch.arange(len(lengths))
    merged = dict(features)  # the batch's own inputs, untrimmed
    rows = len(groups[0])
    for key, first in outputs[0].items():
        if key in features and isinstance(features[key], torch.Tensor):
            continue
        if not isinstance(first, torch.Tensor) or first.dim() == 0 or first.size(0) != rows:
            merged[key] = first  # not a row output (e.g. the modality): as the first group returned it
            continue
        parts = [out[key] for out in outputs]
        if first.dim() >= 2 and any(p.shape[1:] != first.shape[1:] for p in parts):  # token-level: pad back
            width = features["attention_mask"].size(1)
            parts = [torch.nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, width - p.size(1))) for p in parts]
        merged[key] = torch.cat(parts).index_select(0, inverse.to(first.device))
    return merged


@contextmanager
def trimmed_padding(model: Any, enabled: bool = True, overhead: int = GROUP_OVERHEAD_TOKENS) -> Iterator[None]:
    """Within the block, ``model``'s forward computes each batch by :func:`grouped_forward` (the model's own
    forward restored afterwards, also on an error). ``enabled = False`` leaves the forward as it is."""
    if not enabled:
        yield
        return
    own = model.forward
    replaced = model.__dict__.get("forward")  # an instance's own forward (e.g. a compiled one), put back after
    model.forward = lambda features, **kwargs: grouped_forward(lambda part: own(part, **kwargs), features, overhead)
    try:
        yield
    finally:
        if replaced is None:
            del model.forward
        else:
            model.forward = replaced
