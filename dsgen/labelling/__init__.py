"""Labelling: a judge's label (or rating) for every pair, between postprocessing and reweighting."""

from dsgen.labelling.base import LABELLERS, LabelContext, Labeller, LabelReport

__all__ = ["LABELLERS", "LabelContext", "Labeller", "LabelReport"]
