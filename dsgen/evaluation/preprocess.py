"""Text conventions for evaluation: the published figures of the three papers use different ones.

| convention | what the encoder sees | used by |
| --- | --- | --- |
| ``raw`` (default) | the sentences as released, cased, untokenised | MTEB; RISE's STSb figures; DINO's released evaluation script (STSb) |
| ``senteval`` | SentEval's files: Moses ``tokenizer.perl -l en -no-escape``, then lower-cased for STS12-16 and STSb (SICK is tokenised but keeps its case), tokens joined by single spaces | GenSE (through SimCSE's SentEval); RISE's Table 7 |

DINO does not state its text preprocessing. The Moses tokeniser is ``sacremoses``' port of the
Perl script.
"""

from __future__ import annotations

from typing import Any

from dsgen.errors import DsgenError

PREPROCESSORS = ("raw", "senteval")


def check_preprocess(name: str) -> str:
    if name not in PREPROCESSORS:
        from dsgen.suggest import unknown

        raise DsgenError(unknown("preprocessing", name, PREPROCESSORS))
    return name


def senteval_sentence(text: str, lowercase: bool, tokenizer: Any) -> str:
    """One sentence as SentEval's ``get_transfer_data.bash`` leaves it (then ``' '.join`` of its tokens)."""
    out = tokenizer.tokenize(text, escape=False, return_str=True)
    return " ".join((out.lower() if lowercase else out).split())


def apply(name: str, pairs: Any, lowercase: bool) -> Any:
    """``pairs`` (a :class:`dsgen.data.scored_pairs.PairSet`) under convention ``name``."""
    check_preprocess(name)
    if name == "raw":
        return pairs
    from sacremoses import MosesTokenizer

    from dsgen.data.scored_pairs import PairSet

    tok = MosesTokenizer(lang="en")
    cache: dict[str, str] = {}

    def conv(s: str) -> str:
        if s not in cache:
            cache[s] = senteval_sentence(s, lowercase, tok)
        return cache[s]

    return PairSet([conv(s) for s in pairs.sentences1], [conv(s) for s in pairs.sentences2], list(pairs.scores))
