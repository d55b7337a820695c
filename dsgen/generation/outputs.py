"""What a decode call is asked for and what it gives back, and where an output ends and whether it is kept.

- :class:`DecodeRequest`: ``n`` continuations of a prompt, debiased against counter prompts.
- :class:`DecodeOutput`: one sampled continuation, its tokens and log-probabilities, kept or why not.
- :class:`OutputRules`: DINO's output rules (``_process_output``): which tokens may end a text, the
  end-of-text ids, and the task spec's judgement of a decoded text.

The fast loop (:mod:`dsgen.generation.decoding`) and DINO's reference loop
(:mod:`dsgen.generation.reference`) both take requests and return outputs judged by these rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dsgen.taskspec import OutputFormat

QUOTE = '"'


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


__all__ = ["QUOTE", "DecodeRequest", "DecodeOutput", "OutputRules"]
