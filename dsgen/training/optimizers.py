"""Optimizers the trainers can use, by name (``TrainingConfig.optimizer``).

- ``adamw-uncorrected`` (DINO's and RISE's default): the AdamW of sentence-transformers 0.4's
  ``fit``, which DINO's and RISE's code ran (RISE ships that library: its ``SentenceTransformer.py``
  builds ``transformers.AdamW(params, lr, eps=1e-6, correct_bias=False)`` with weight decay 0.01 on all
  but biases and LayerNorm weights). Without bias correction the first steps are larger than
  torch's: at step t the moments are not divided by ``1 - beta^t``. transformers 5 no longer ships
  that class, so it is written here (:class:`AdamWUncorrected`), update for update.
- ``adamw-torch``: ``torch.optim.AdamW`` with bias correction and eps 1e-8 (the sentence-transformers
  trainer's default today).
"""

from __future__ import annotations

from typing import Any

OPTIMIZERS = ("adamw-uncorrected", "adamw-torch")


def _optimizer_base() -> type:
    import torch

    return torch.optim.Optimizer


class AdamWUncorrected(_optimizer_base()):  # type: ignore[misc]
    """AdamW as ``transformers.AdamW(correct_bias=False)`` computed it (transformers 4.x, used by
    sentence-transformers 0.4): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``,
    ``p -= lr m / (sqrt(v) + eps)``, then ``p -= lr wd p`` (decoupled weight decay, applied after)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    def step(self, closure: Any = None) -> Any:
        import torch

        loss = closure() if closure is not None else None
        with torch.no_grad():
            for group in self.param_groups:
                beta1, beta2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["step"] = 0
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                    state["step"] += 1
                    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                    exp_avg.mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
                    exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                    p.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(group["eps"]), value=-group["lr"])
                    if group["weight_decay"] > 0.0:
                        p.add_(p, alpha=-group["lr"] * group["weight_decay"])
        return loss


def optimizer_cls_and_kwargs(name: str, learning_rate: float) -> tuple[type, dict[str, Any]] | None:
    """What the Hugging Face trainer builds the optimizer from (None: its default, torch's AdamW, eps
    1e-8). The trainer groups the parameters and sets each group's weight decay (none on biases and
    LayerNorm weights), but builds a given class from these keyword arguments alone: the learning rate
    must be among them (the class default would be used otherwise)."""
    if name == "adamw-uncorrected":
        return AdamWUncorrected, {"lr": learning_rate, "eps": 1e-6}
    if name == "adamw-torch":
        return None
    from dsgen.errors import DsgenError

    raise DsgenError(f"unknown optimizer '{name}'; use one of {', '.join(OPTIMIZERS)}")


__all__ = ["AdamWUncorrected", "optimizer_cls_and_kwargs", "OPTIMIZERS"]
