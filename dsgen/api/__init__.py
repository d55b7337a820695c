"""The library API: what every ``dsgen`` command does, as functions a notebook or a script calls.

Each takes the command's options as keyword arguments of the same names (Python types: lists of methods and seeds,
paths), checks them the same way (a one-line :class:`~dsgen.errors.DsgenError` before any long work), writes the
same files, and hands back what the command prints, tables as pandas DataFrames; none prints (progress bars aside:
``progress=False`` turns them off).

| function | returns | command |
| --- | --- | --- |
| :func:`run` | :class:`~dsgen.api.comparison.Runs`: results, ``table`` | ``dsgen run`` |
| :func:`compare` | :class:`~dsgen.api.comparison.Compared`: ``table``, ``long_table``, ``comparison``, failures, paths | ``dsgen compare`` |
| :func:`curve` | :class:`~dsgen.api.learning_curve.Curve`: ``table``, ``means``, points | ``dsgen curve`` |
| :func:`judge_claims` | :class:`~dsgen.api.verdicts.Claims`: ``table``, ``records``, verdicts | ``dsgen claims`` |
| :func:`regress` | :class:`~dsgen.api.regression.Regression`: ``passed``, ``checks``, ``table`` | ``dsgen regress`` |
| :func:`analyze` | :class:`~dsgen.api.analysis.Analysis`: ``table`` | ``dsgen analyze`` |
| :func:`evaluate` | :class:`~dsgen.api.evaluation.Evaluation`: ``result``, ``table`` | ``dsgen eval`` |
| :func:`generate` | :class:`~dsgen.api.generation.Generated`: pairs, path | ``dsgen generate`` |
| :func:`plan` | :class:`~dsgen.planning.RunPlan` | ``dsgen plan`` |

(``dsgen.claims`` is the package of the papers' claims, :mod:`dsgen.claims`, so the function is ``judge_claims``.)

Tables record the command that made them: the command line's, or here the Python call (``command=`` replaces it).

Example:
    >>> import dsgen
    >>> cmp = dsgen.compare(["dino"], preset="smoke", out="runs")  # doctest: +SKIP
    >>> cmp.table[["Avg. mean", "Δ Avg."]]
"""

from dsgen.api.analysis import Analysis, analyze
from dsgen.api.common import NoResult, Report, RunSettings
from dsgen.api.comparison import Compared, Runs, compare, run
from dsgen.api.evaluation import Evaluation, evaluate
from dsgen.api.generation import Generated, generate
from dsgen.api.learning_curve import Curve, curve
from dsgen.api.planning import plan
from dsgen.api.regression import Regression, regress
from dsgen.api.verdicts import Claims, judge_claims

FUNCTIONS = ("analyze", "compare", "curve", "evaluate", "generate", "judge_claims", "plan", "regress", "run")
"""What ``dsgen`` itself exposes (``dsgen.compare``...), imported on first use."""

__all__ = ["Analysis", "Claims", "Compared", "Curve", "Evaluation", "Generated", "NoResult", "Regression", "Report",
           "RunSettings", "Runs", *FUNCTIONS]
