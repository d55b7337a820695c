"""``dsgen.evaluate``: a sentence encoder on the STS tasks, scored as MTEB scores them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError


@dataclass
class Evaluation:
    """What :func:`evaluate` hands back.

    Attributes:
        result: the :class:`~dsgen.evaluation.results.Result` (also written to ``path``).
        tasks: the tasks scored.
        path: the result file written.
    """

    result: Any = field(repr=False)
    tasks: list[str]
    path: Path

    @property
    def table(self) -> Any:
        """Spearman x 100 per task and the average, one row (what ``dsgen eval`` prints)."""
        from dsgen.reports.tables import comparison_frame

        return comparison_frame([self.result], self.tasks)


def task_text(tasks: Sequence[str] | str | None) -> str | None:
    """Tasks as :func:`dsgen.evaluation.tasks.parse_tasks` reads them: a list, or ``"sts12,stsb"``, or ``"mteb"``."""
    return tasks if tasks is None or isinstance(tasks, str) else ",".join(tasks)


def evaluate(model: str, *, tasks: Sequence[str] | str | None = None, data_dir: str | None = None,
             preprocess: str | None = None, json_out: str | Path | None = None, batch_size: int = 64,
             device: str | None = None) -> Evaluation:
    """Evaluate a sentence encoder on STS12-16, STSb and SICK-R (Spearman x 100 of cosine similarities, as MTEB).

    Args:
        model: an encoder alias (``minilm-l6``, a causal-LM encoder such as ``smollm2-l4``), an id or a path (a kept
            model folder is scored with the text template it was trained with).
        tasks: task names (default: DINO's Table 1 columns; ``"mteb"``: MTEB's seven).
        preprocess: evaluation text, ``raw`` (MTEB, the default) or ``senteval`` (GenSE's convention).
        json_out: the result file (default ``runs/eval/<model>.json``).
        device: ``cpu``, ``cuda`` or ``auto`` (the default).

    Example:
        >>> dsgen.evaluate("minilm-l6", tasks=["stsb"]).table  # doctest: +SKIP
    """
    from dsgen.artifacts import check_writable_target
    from dsgen.data.sts import using_data_dir
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import check_device, parse_encoder_spec

    # every argument checked before torch and sentence-transformers are imported (seconds): bad input fails at once
    names = parse_tasks(task_text(tasks))
    if batch_size < 1:
        raise DsgenError(f"--batch-size must be at least 1 (got {batch_size})")
    device = device or "auto"
    preprocess = preprocess or "raw"
    check_device(device)
    parse_encoder_spec(model)
    slug = model.strip("/").replace("/", "__").replace(":", "_")
    path = Path(json_out) if json_out is not None else Path("runs") / "eval" / f"{slug}.json"
    check_writable_target(path)
    evaluator = StsEvaluator(names, data_dir, batch_size, preprocess=preprocess)
    evaluator.pairs  # fail on bad data before loading the model
    with using_data_dir(data_dir):
        from dsgen.training.model_folder import folder_template

        # a kept model folder carries the text template it was trained and scored with (GenSE's prompt)
        template = folder_template(Path(model)) if Path(model).is_dir() else None
        from dsgen.encoders import load_encoder

        result = evaluator.evaluate(load_encoder(model, device), name=model, template=template)
    result.extra["evaluation_data"] = {"fingerprint": evaluator.fingerprint(), "preprocess": preprocess}
    result.save(path)
    return Evaluation(result, names, path)


__all__ = ["Evaluation", "evaluate"]
