"""Zero-shot judgements read from a causal LM's next-token distribution.

A judge puts a pair into a prompt and reads the probabilities of a few answer words at the next
position (GenSE's discriminator: "true" / "false"; an LM labeller: the digits 0 to 5), each word
summed over its spellings and normalised over the answers. Prompts of similar token length are
batched together through the exact prefill (:func:`dsgen.generation.forward.extend_rows`), so a pair's
score is the same bits whatever else is in its batch, on any CPU (row blocks of the sizes at which the CPU's
matrix multiply gives a row the same bits wherever it sits, measured for the model: see
:mod:`dsgen.generation.prefill_step`); scores are cached per (model fingerprint, prompt, pair) for the
process (:data:`SCORES`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from dsgen.errors import DsgenError


class ScoreCache:
    """A score per (scoring model's fingerprint, prompt, x1, x2) for this process, so seeds and methods
    that put the same pairs through the same judge score them once. Bounded: the oldest go first."""

    def __init__(self, max_entries: int = 500_000) -> None:
        self.max_entries = max_entries
        self.entries: OrderedDict[str, float] = OrderedDict()

    def get(self, key: str) -> float | None:
        value = self.entries.get(key)
        if value is not None:
            self.entries.move_to_end(key)
        return value

    def put(self, key: str, value: float) -> None:
        self.entries[key] = value
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


SCORES = ScoreCache()


def word_token_ids(tokenizer: Any, words: Sequence[str]) -> list[int]:
    """The first token id of each spelling of a word, distinct."""
    ids = []
    for w in words:
        toks = tokenizer.encode(w, add_special_tokens=False)
        if toks and toks[0] not in ids:
            ids.append(toks[0])
    return ids


def option_ids(tokenizer: Any, options: Sequence[Sequence[str]]) -> list[list[int]]:
    """Token ids of each answer (its spellings), with ids that two answers share dropped (a bare space in
    a character-level tokenizer); a one-line error when an answer is left without one."""
    ids = [word_token_ids(tokenizer, words) for words in options]
    counts: dict[int, int] = {}
    for group in ids:
        for i in group:
            counts[i] = counts.get(i, 0) + 1
    ids = [[i for i in group if counts[i] == 1] for group in ids]
    if not all(ids):
        names = ", ".join(repr(o[0].strip()) for o in options)
        raise DsgenError(f"the judge's tokenizer does not tell the answers {names} apart by their first token")
    return ids


def answer_lead(tokenizer: Any, options: Sequence[Sequence[str]]) -> str:
    """The text a model writes before an answer when its tokenizer spells every answer's spaced form as a
    separate space token and the answer (SmolLM2: ``" 4"`` is ``" "`` + ``"4"``): appended to a prompt, it
    puts the answer where the model writes it, instead of reading an unspaced digit right after a word."""
    firsts = set()
    for words in options:
        for w in (w for w in words if w.startswith(" ")):
            ids = tokenizer.encode(w, add_special_tokens=False)
            if len(ids) < 2:
                return ""  # the spaced answer is one token: read it as it is
            firsts.add(ids[0])
    return tokenizer.decode(list(firsts)) if len(firsts) == 1 else ""


def option_probabilities(lm: Any, prompts: Sequence[str], options: Sequence[Sequence[str]], batch_size: int = 32,
                         progress: Callable[[int], Any] | None = None) -> Any:
    """``[len(prompts), len(options)]``: the probability of each answer at the next position of each prompt,
    normalised over the answers (each answer's spellings summed). Where the tokenizer writes a space token
    before the answers (:func:`answer_lead`), a prompt that does not end in whitespace gets it first.

    The prompts run ``batch_size`` at a time through the exact prefill
    (:func:`~dsgen.generation.forward.extend_rows`, :mod:`dsgen.generation.prefill_step`): packed, attention
    prompt by prompt and linear layers in fixed row blocks, so a prompt's logits are the same bits in any
    batch, on any CPU (the row blocks' sizes measured for the model on this CPU, once per process)."""
    import numpy as np
    import torch

    from dsgen.generation.forward import extend_rows, pad_id, tokenize

    tok, model = lm.tokenizer, lm.model
    groups = option_ids(tok, options)
    lead = answer_lead(tok, options)
    prompts = [p if not lead or p[-1:].isspace() else p + lead for p in prompts]
    ids = tokenize(tok, list(prompts)) if prompts else []
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))  # similar lengths together: fewer key widths
    out = np.zeros((len(ids), len(groups)))
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            logits = extend_rows(model, [ids[j] for j in idx], pad_id(tok), attention="softmax", keep_cache=False).logits
            logp = torch.log_softmax(logits, dim=-1)
            per_option = torch.stack([torch.logsumexp(logp[:, g], dim=-1) for g in groups], dim=-1)
            out[idx] = torch.softmax(per_option, dim=-1).cpu().numpy()
            if progress:
                progress(len(idx))
    return out


def cached_judgements(lm: Any, pairs: Sequence[tuple[str, str]], prompt: str, score: Callable[[list[str]], Any],
                      render: Callable[[str], str] = lambda text: text, settings: str = "", progress: bool = False,
                      what: str = "judge") -> Any:
    """One score per (x1, x2), computed once per (model, prompt, settings, pair) in this process: ``score``
    maps rendered prompts (``render`` of ``prompt`` filled with the pair) to numbers; ``settings`` names
    whatever else changes the score (how ``render`` renders, what ``score`` reads)."""
    import numpy as np

    from dsgen.identity import score_key
    from dsgen.progress import progress_bar

    fingerprint = {**lm.fingerprint(), "dtype": str(lm.model.dtype), "settings": settings}
    keys = [score_key(fingerprint, prompt, a, b) for a, b in pairs]
    todo = list(dict.fromkeys(p for p, k in zip(pairs, keys) if SCORES.get(k) is None))
    with progress_bar(what, total=len(todo), enabled=progress and bool(todo)) as advance:
        fresh = dict(zip(todo, (float(v) for v in score([render(prompt.format(x1=a, x2=b)) for a, b in todo])))) \
            if todo else {}
        advance(len(todo))
    for p, k in zip(pairs, keys):
        if p in fresh:
            SCORES.put(k, fresh[p])
    return np.array([fresh[p] if p in fresh else SCORES.get(k) for p, k in zip(pairs, keys)], dtype=float)


__all__ = ["SCORES", "ScoreCache", "cached_judgements", "option_ids", "option_probabilities", "word_token_ids"]
