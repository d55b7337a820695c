"""The numerics a model decodes with on this machine: the record, what the process remembers, the override.

The machine's probe (:mod:`dsgen.generation.invariance`, above the batch: it runs the batch)
decides which batch-invariant numerics hold for a model and records them here as a
:class:`Numerics`. This module sits below the batch: the prefill, the active batch and the batched
forward (:mod:`~dsgen.generation.forward`, :mod:`~dsgen.generation.batch`) are handed a
:class:`Numerics` and read it; they never probe. Per process, the record found for a model at a thread
count is remembered for the model's lifetime (:func:`remember`, :func:`known`): the row counts a matrix
multiply is invariant at depend on the thread count, so a process that changes it (one thread for a test
or an actor, then two) is given the record of the count it computes with. :func:`assume`
overrides it within a block (what a probe tries, or a test forces).
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from dsgen.generation.kernels import ONEDNN, Kernels, row_blocks

ATTENTIONS = ("softmax", "exact-sum")  # tried in this order


@dataclass(frozen=True)
class Numerics:
    """What the probe found for one model on this machine.

    Args:
        attention: the softmax of the row-wise attention, ``"softmax"`` (PyTorch's fused kernel) or
            ``"exact-sum"`` (:func:`~dsgen.generation.decode_step.exact_softmax`).
        kernels: what the model's linear layers run (:class:`~dsgen.generation.kernels.Kernels`): the row
            counts at which they give every row the same bits, the counts whose blocks run the other kernel
            (:func:`~dsgen.generation.kernels.transposed`; the same bits, faster there), and whose matrix multiply
            (``"aten"``, PyTorch's own, or ``"onednn"``, every block; other bits than PyTorch's).
        shared: whether sharing rows and prefixes is exact (every probe passed).
        threads: whether one thread computes what several do (a Ray actor and a local run agree).
        cpu: PyTorch's CPU capability (``AVX2``, ``AVX512``...), or the device.
        failed: the probes that failed, for the sidecar and ``dsgen`` warnings.
    """

    attention: str = "softmax"
    kernels: Kernels = Kernels(())
    shared: bool = True
    threads: bool = True
    cpu: str = ""
    failed: tuple[str, ...] = ()

    @property
    def counts(self) -> tuple[int, ...]:
        """The row counts at which the model's linear layers give every row the same bits."""
        return self.kernels.counts

    def blocks(self, n: int) -> tuple[int, ...]:
        """The batch-invariant row blocks a step of ``n`` rows is multiplied in
        (:func:`~dsgen.generation.kernels.row_blocks`)."""
        return row_blocks(n, self.counts)

    def rows(self, n: int) -> int:
        """The rows a step of ``n`` rows forwards: its blocks' total (zero rows pad the last)."""
        return sum(row_blocks(n, self.counts))

    def to_dict(self) -> dict[str, Any]:
        kernels = self.kernels
        return {**asdict(self), "failed": list(self.failed),
                "kernels": {"counts": list(kernels.counts), "transposed": list(kernels.transposed),
                            "library": kernels.library, "packs": kernels.packs}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Numerics:
        """The record :meth:`to_dict` wrote."""
        kernels = data["kernels"]
        return cls(data["attention"], Kernels(tuple(kernels["counts"]), tuple(kernels["transposed"]),
                                              kernels["library"], bool(kernels["packs"])),
                   bool(data["shared"]), bool(data["threads"]), data["cpu"], tuple(data["failed"]))

    def summary(self) -> str:
        """One line for sidecars and logs, e.g. ``AVX512: exact-sum softmax, rows shared, thread-invariant`` (and
        ``, oneDNN matmul`` where the linear layers run oneDNN's)."""
        return (f"{self.cpu}: {self.attention} softmax, " + ("rows shared" if self.shared else "rows not shared")
                + (", thread-invariant" if self.threads else ", not thread-invariant")
                + (", oneDNN matmul" if self.kernels.library == ONEDNN else ""))


# model -> thread count -> the record found for it there
_found: "weakref.WeakKeyDictionary[Any, dict[int, Numerics]]" = weakref.WeakKeyDictionary()
_trying: contextvars.ContextVar[Numerics | None] = contextvars.ContextVar("dsgen_numerics_trying", default=None)


def known(model: Any) -> Numerics | None:
    """The numerics to use for ``model``: the one :func:`assume` sets, else the one remembered for it
    at the current thread count in this process, else None (not probed yet:
    :func:`dsgen.generation.invariance.numerics` probes)."""
    trying = _trying.get()
    if trying is not None:
        return trying
    return _found.get(model, {}).get(_threads())


def remember(model: Any, found: Numerics) -> Numerics:
    """Remember ``found`` for ``model`` at the current thread count, for the model's lifetime in this process;
    return it."""
    _found.setdefault(model, {})[_threads()] = found
    return found


def _threads() -> int:
    import torch

    return torch.get_num_threads()


@contextlib.contextmanager
def assume(candidate: Numerics) -> Iterator[None]:
    """Within the block, :func:`known` (and so :func:`dsgen.generation.invariance.numerics`) answers
    ``candidate`` for every model."""
    token = _trying.set(candidate)
    try:
        yield
    finally:
        _trying.reset(token)


__all__ = ["Numerics", "ATTENTIONS", "known", "remember", "assume"]
