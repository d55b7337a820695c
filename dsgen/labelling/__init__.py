"""Labelling: a judge's label (or rating) for every pair, between postprocessing and reweighting."""

from dsgen.labelling.base import (LABELLERS, MAX_ABSTENTION_SHARE, LabelContext, Labeller, LabelReport,
                                  count_abstentions)

__all__ = ["LABELLERS", "MAX_ABSTENTION_SHARE", "LabelContext", "Labeller", "LabelReport", "count_abstentions"]
