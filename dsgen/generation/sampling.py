"""Sampling settings and the per-step sampler of the decode loops: self-debiasing, top-k, top-p, the draw.

Self-debiasing (Schick et al., 2021; DINO, Schick & Schütze, 2021): for a group of one main row and
its counter rows,

    p   = softmax over the main row
    p_c = max over the counter rows of their softmax
    p'  = p * max(exp(-lambda * max(p_c - p, 0)), eps), renormalised

then top-k and top-p filter p' and one token is drawn (the renormalisation is top-k's, over its candidates: the
same probabilities; :meth:`TokenSampler.debiased`). :class:`TokenSampler` does this for every
group of a step at once; the fast loop (:mod:`dsgen.generation.decoding`) and DINO's reference loop
(:mod:`dsgen.generation.reference`) share it, so that they differ only in scheduling.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dsgen.config import Config


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


def self_debias(p_main: Any, p_counter: Any, decay_constant: float, epsilon: float, renormalise: bool = True) -> Any:
    """Self-debiasing of next-token distributions (Schick et al., 2021, eq. for alpha).

    Args:
        p_main: ``[G, V]`` probabilities under the main instruction.
        p_counter: ``[G, V]`` maximum probability over the counter instructions (zeros where
            a group has none); used as working memory: its values are overwritten.
        renormalise: divide by the sum over the vocabulary (the formula's last step); off, the weights
            ``p_main * alpha`` (the sampler's: what it does next renormalises them).
    Returns:
        ``[G, V]`` debiased probabilities, ``p_main * alpha / sum`` (``p_main * alpha`` without ``renormalise``),
        computed in place in ``p_counter`` (each in-place step is the same elementwise operation as its
        out-of-place form, so the values are those of the textbook formula; large vocabularies make the saved
        allocations count). Where a group has no counter rows, alpha is exactly 1.
    """
    alpha = p_counter.sub_(p_main).clamp_min_(0.0).mul_(-decay_constant).exp_().clamp_min_(epsilon)
    p = alpha.mul_(p_main)
    return p.div_(p.sum(dim=-1, keepdim=True)) if renormalise else p


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
        """Debiased next-token weights ``[G, V]`` before top-k / top-p: ``p * alpha``, not divided by their sum.

        What follows renormalises them (top-k's candidates by their own sum, the full-vocabulary warpers by a
        softmax), so the sum over the vocabulary changes no probability; it is left out because it is the one
        step whose bits would depend on the other groups: PyTorch splits a lone row's sum between threads, and a
        group without counter rows would be divided by its sum or not as its block held a group with some.
        Only the rows named in ``main_rows`` and ``counter_rows`` are read (a batch's free slots
        and unused rows cost nothing), and a row named several times (shared by several groups) is
        softmaxed once; every step is row-wise and elementwise, so a group's values do not depend on which
        other groups are present, in what block, on how many threads.
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
            p_main = self_debias(p_main, p_counter, self.cfg.decay_constant, self.cfg.epsilon, renormalise=False)
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

    def sample(self, logits: Any, main_rows: Any, counter_rows: Any, counter_group: Any,
               copies: Any = None) -> tuple[Any, Any]:
        """(token per group, its log-probability under the distribution it was drawn from).

        With top-k on, the vocabulary-wide work (softmax, debiasing, top-k) runs on blocks of
        :attr:`BLOCK` groups, whose rows stay in the CPU's cache between its dozen passes; every
        step of it is row-wise, so the candidates are the same bits as in one block. With ``copies``
        (``[G]``: for each group, which of the groups given it has the rows of), the groups given are the distinct
        ones and the distributions are computed once for each, then copied to every group that holds the same
        rows: the same bits, since a group's distribution depends on its rows alone. The draw is
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
        if copies is not None:
            probs = probs.index_select(0, copies)
            idx = None if idx is None else idx.index_select(0, copies)
        choice = torch.multinomial(probs, 1, generator=self.generator)
        tokens = choice if idx is None else idx.gather(1, choice)
        return tokens.squeeze(1), torch.log(probs.gather(1, choice)).squeeze(1)


__all__ = ["SamplingConfig", "TokenSampler", "self_debias"]
