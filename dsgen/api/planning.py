"""``dsgen.plan``: every resolved setting a run would use, and where each value came from."""

from __future__ import annotations

from typing import Any


def plan(method: str, *, preset: str = "quick", seed: int | None = None, data_seed: int | None = None,
         generator: str | None = None, base_url: str | None = None, encoder: str | None = None,
         device: str | None = None, preprocess: str | None = None) -> Any:
    """The :class:`~dsgen.planning.RunPlan` of one run of ``method`` under ``preset`` (default: the preset's first
    run; the other arguments replace the preset's settings, as ``dsgen plan``'s options do). ``plan.rows()`` gives
    (section, setting, value, origin); ``plan.to_dict()`` and ``plan.origins`` what ``dsgen plan --json`` prints.

    Example:
        >>> dsgen.plan("rise", preset="cpu").origins["trainer"]  # doctest: +SKIP
    """
    from dsgen.orchestration import check_overrides
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    p = load_preset(preset)
    return plan_run(method, p, p.runs()[0][1] if seed is None else seed,
                    check_overrides(generator, encoder, device, preprocess, base_url), p.data_seed_for(data_seed))


__all__ = ["plan"]
