"""``dsgen.curve``: each method's score as the generation inputs grow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import OnResult, Report, RunSettings, method_list, records_call
from dsgen.api.common import publish as publish_tables  # ``publish`` is also an argument's name
from dsgen.errors import DsgenError
from dsgen.orchestration import Seeds


@dataclass
class Curve(Report):
    """What :func:`curve` hands back (``results`` and ``failures`` hold every size's, ``by_size`` each size's).

    Attributes:
        points: one :class:`~dsgen.reports.curve.CurvePoint` per (size, method).
        by_size: per number of inputs, ``{method: results}``.
    """

    points: list[Any] = field(default_factory=list, repr=False)
    by_size: dict[int, dict[str, list[Any]]] = field(default_factory=dict, repr=False)

    @property
    def table(self) -> Any:
        """One row per (inputs, method): mean, 95% interval, runs, training pairs, human cap (``<stem>.csv``)."""
        from dsgen.reports.tables import curve_frame

        return curve_frame(self.points)

    @property
    def means(self) -> Any:
        """Mean average score, one row per method and one column per number of inputs (what ``dsgen curve``
        prints)."""
        means = self.table["mean"].unstack("inputs")
        means.index.name = "method"
        return means


def parse_sizes(sizes: Sequence[int] | str) -> list[int]:
    """``"100,300,1000"`` or ``[100, 300, 1000]`` -> the numbers of inputs; a one-line error unless positive."""
    from dsgen.orchestration import seed_list

    text = sizes if isinstance(sizes, str) else ",".join(str(n) for n in sizes)
    counts = seed_list(text, "--sizes")
    if not counts or min(counts) < 1:
        raise DsgenError(f"--sizes must be positive integers such as 100,300,1000 (got '{text}')")
    return counts


@records_call
def curve(methods: Sequence[str], *, sizes: Sequence[int] | str = (100, 300, 1000), name: str | None = None,
          preset: str = "cpu", seeds: Seeds = None, data_seeds: Seeds = None, generator: str | None = None,
          base_url: str | None = None, encoder: str | None = None, device: str | None = None,
          preprocess: str | None = None, save_model: bool = False, backend: str = "local",
          address: str | None = None, workers: int | None = None, cpus_per_worker: int | None = None,
          out: str | Path = "runs", publish: str | Path | None = None, data_dir: str | None = None,
          progress: bool = True, on_result: OnResult | None = None, console: Any = None,
          command: str | None = None) -> Curve:
    """Each method's score at each number of generation inputs (one copy of the preset per size, named
    ``<preset>-<size>``), all sizes' runs as one graph; Markdown, CSV and PNG under ``out/tables/<preset>/``
    (default name ``curve-<methods>``). The other arguments are :class:`~dsgen.api.common.RunSettings`."""
    from dataclasses import replace

    from dsgen.reports.curve import curve_points
    from dsgen.reports.tables import tasks_text, write_curve
    from dsgen.models import describe_encoder
    from dsgen.planning import plan_run

    settings = RunSettings(preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
                           encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                           backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                           out=out, publish=publish, data_dir=data_dir, progress=progress)
    methods = method_list(methods)
    counts = parse_sizes(sizes)
    ov = settings.overrides()
    planned = settings.prepare(methods, ov)
    p, runs = planned.preset, planned.runs
    at = {n: replace(p, max_inputs=n, name=f"{p.name}-{n}") for n in sorted(counts)}
    for sized in at.values():  # every plan of every size is checked before any long work
        for m in methods:
            for d, s in runs:
                plan_run(m, sized, s, ov, d)
    failures: dict[int, list] = {n: [] for n in at}  # every size's runs as one graph, fanned out together
    results = dict(zip(at, settings.execute([(methods, sized) for sized in at.values()], planned, ov, on_result,
                                            console, [failures[n] for n in at])))
    points = curve_points(results, failures)
    header = {"preset": p.name, "runs": runs, "tasks_text": tasks_text(p.tasks),
              "encoders": sorted({describe_encoder(r.model) for by in results.values() for rs in by.values() for r in rs})}
    paths = write_curve(points, planned.runner.out / "tables" / p.name, name or "curve-" + "-".join(methods), header,
                        command or "")
    every = {m: [r for by in results.values() for r in by.get(m, [])] for m in methods}
    return Curve(p, runs, {m: rs for m, rs in every.items() if rs}, [f for n in at for f in failures[n]], paths,
                 publish_tables(paths, settings.publish, p.name), points=points, by_size=results)


__all__ = ["Curve", "curve", "parse_sizes"]
