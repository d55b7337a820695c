"""GenSE-style (Chen et al., EMNLP 2022, "Generate, Discriminate and Contrast"): entailment and
contradiction for each input, a discriminator filter, and contrastive training with hard negatives
and GenSE's encoder prompt.

``gense`` generates through the same self-debiasing core as DINO (DINO's sampling, each label
debiased against the other) instead of GenSE's fine-tuned T5: that is the point of one shared
core. ``gense-paper-sampling`` samples as GenSE does (top-p 0.9 with the library's top-k 50, one
output per label, no debiasing). ``dino-gense-filter`` puts DINO's data through the same filter:
stages compose across methods.
"""

from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe

PAPER = "GenSE: Chen et al., EMNLP 2022"
TRIPLETS_ONLY = {"label_smoothing": 0.0, "random_pairs_per_x1": 0, "validation_fraction": 0.0}


def gense_recipe(**changes) -> Method:
    recipe = dict(paper=PAPER, generator="debiased", generation={"task": "gense"}, postprocess=TRIPLETS_ONLY,
                  reweighter="discriminator", trainer="contrastive")
    recipe.update(changes)
    return Method(**recipe)


@register_method("gense")
def gense() -> Method:
    return gense_recipe(description="GenSE: entailment + contradiction per input, discriminator filter (alpha 0.9, "
                                    "length and containment rules), InfoNCE with the contradiction as hard negative, "
                                    "GenSE's prompt")


@register_method("gense-no-filter")
def gense_no_filter() -> Method:
    return gense_recipe(description="GenSE ablation: the same triplets without the discriminator filter", reweighter=None)


@register_method("gense-paper-sampling")
def gense_paper_sampling() -> Method:
    return gense_recipe(description="GenSE with GenSE's sampling: top-p 0.9, top-k 50, one output per label, "
                                    "no self-debiasing",
                        generation={"task": "gense", "per_label": 1, "counter_labels": False,
                                    "sampling": {"top_k": 50, "top_p": 0.9, "decay_constant": 0.0}})


@register_method("dino-gense-filter")
def dino_gense_filter() -> Method:
    return dino_recipe(description="DINO's data through GenSE's discriminator (labels 1 need P(true) >= 0.9, "
                                   "0 need P(false) >= 0.9, 0.5 kept), regression trainer",
                       paper=PAPER, reweighter="discriminator")
