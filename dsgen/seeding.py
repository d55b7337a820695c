"""Seeding without side effects: the one way dsgen seeds anything random it builds or trains.

``seeded(seed)`` runs a block with Python's, NumPy's and torch's generators set from ``seed``
and puts the previous states back afterwards, so that a freshly initialised layer (a
classifier head, a projection) is the same whatever ran before in the process, and nothing
after the block depends on it either.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Run the block with every generator seeded from ``seed`` (None: leave them alone)."""
    if seed is None:
        yield
        return
    import numpy as np
    import torch

    py_state, np_state = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
