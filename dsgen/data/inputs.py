"""Generation inputs x1: a text file (one sentence per line), a JSONL from an ``sts-x1`` run
(its ``text_a`` values), or ``stsb-train`` (the STS benchmark train sentences, as DINO's STS-x2)."""

from __future__ import annotations

from pathlib import Path

from dsgen.errors import DsgenError

NAMED_INPUTS = ("stsb-train",)


def load_inputs(source: str, max_inputs: int | None = None, data_dir: str | None = None) -> list[str]:
    """Read distinct, non-empty input sentences in order; keep the first ``max_inputs``."""
    if source == "stsb-train":
        from dsgen.data.sts import data_dir as resolve, stsb_train_sentences

        texts = stsb_train_sentences(resolve(data_dir))
    else:
        path = Path(source)
        if not path.is_file():
            raise DsgenError(f"inputs '{source}' is neither {', '.join(NAMED_INPUTS)} nor an existing file")
        if path.suffix == ".jsonl":
            from dsgen.data.pairs import read_pairs

            texts = [p.text_a for p in read_pairs(path)]
        else:
            try:
                texts = path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise DsgenError(f"inputs '{source}' are not UTF-8 text (byte {exc.start}); give a text file "
                                 "with one sentence per line") from None
    if max_inputs is not None and max_inputs < 1:
        raise DsgenError(f"--max-inputs must be at least 1 (got {max_inputs})")
    out = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    if not out:
        raise DsgenError(f"inputs '{source}' hold no sentence")
    return out[:max_inputs] if max_inputs else out
