"""Python's garbage collector around long work: the objects alive before it set aside for its duration.

A process holding models holds hundreds of thousands of objects (their modules, transformers' and torch's own), and
a full collection walks them all: about 0.26 s after importing the libraries, more with models loaded. Long work
triggers such collections (the decode loop one or two per call, about 2% of it) or asks for them (accelerate's
``free_memory`` at the start of every ``Trainer`` run), and the objects alive before the work are not the garbage it
leaves.
:func:`heap_frozen` serves both: the decoder (:mod:`dsgen.generation.decoding`) and every training run
(:mod:`dsgen.training.trainer_run`).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def heap_frozen() -> Iterator[None]:
    """The objects alive now kept out of the garbage collector's scans until the block ends (``gc.freeze``).

    Frozen, a full collection inside the block skips what existed before it; what the block allocates is collected
    as usual, and an object alive before it that becomes cyclic garbage inside it is collected at the first
    collection after it. Nested or concurrent blocks leave the freezing to the outermost one, and a freeze made
    before (by the program, or by the interpreter: CPython 3.12 starts with 375 static tuples frozen) is left as
    it is, since ``gc.unfreeze`` would release it too; such a process runs without the shortcut."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


__all__ = ["heap_frozen"]
