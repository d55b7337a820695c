"""GenSE-style (Chen et al., EMNLP 2022, "Generate, Discriminate and Contrast"): entailment and
contradiction for each input through the same self-debiasing core (instead of GenSE's
fine-tuned T5), a discriminator filter, and contrastive training with hard negatives.
``dino-gense-filter`` puts DINO's data through the same filter: stages compose across methods.
"""

from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe

PAPER = "GenSE: Chen et al., EMNLP 2022"


@register_method("gense")
def gense() -> Method:
    return Method(description="GenSE: entailment + contradiction per input, discriminator filter (alpha 0.9), "
                              "InfoNCE with the contradiction as hard negative",
                  paper=PAPER, generator="debiased", generation={"task": "gense"},
                  postprocess={"label_smoothing": 0.0, "random_pairs_per_x1": 0, "validation_fraction": 0.0},
                  reweighter="discriminator", trainer="contrastive")


@register_method("gense-no-filter")
def gense_no_filter() -> Method:
    return Method(description="GenSE ablation: the same triplets without the discriminator filter",
                  paper=PAPER, generator="debiased", generation={"task": "gense"},
                  postprocess={"label_smoothing": 0.0, "random_pairs_per_x1": 0, "validation_fraction": 0.0},
                  trainer="contrastive")


@register_method("dino-gense-filter")
def dino_gense_filter() -> Method:
    return dino_recipe(description="DINO's data through GenSE's discriminator (labels 1 need P(true) >= 0.9, "
                                   "0 need P(false) >= 0.9, 0.5 kept), regression trainer",
                       paper=PAPER, reweighter="discriminator")
