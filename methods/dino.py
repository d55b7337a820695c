"""DINO (Schick & Schütze, 2021, "Generating Datasets with Pretrained Language Models") and its
Table 2 ablations. The reference method: copy this file to add one.

A method is only a recipe: which generator and task spec, which postprocessing, reweighter and
trainer, each by name with the fields it changes. Everything else comes from the preset
(scale: models, number of inputs) and from the configs' defaults (the paper's settings).
"""

from dsgen.method import Method, register_method

PAPER = "DINO: Schick & Schütze, EMNLP 2021"


def dino_recipe(**changes) -> Method:
    """DINO's STS-x2 recipe: sts-x2 over the preset's inputs (STSb train sentences), DINO's
    postprocessing, cosine regression; ``changes`` replace whole fields."""
    recipe = dict(paper=PAPER, generator="debiased", generation={"task": "sts-x2"}, postprocess={},
                  trainer="regression")
    recipe.update(changes)
    return Method(**recipe)


@register_method("dino")
def dino() -> Method:
    return dino_recipe(description="DINO STS-x2: self-debiased x2 for STSb train sentences, regression trainer")


@register_method("dino-x1x2")
def dino_x1x2() -> Method:
    return dino_recipe(description="DINO STS-x1x2: x1 generated from scratch (sts-x1, top-p only), then x2",
                       x1_generation={"task": "sts-x1"})


@register_method("dino-decay0")
def dino_decay0() -> Method:
    return dino_recipe(description="DINO ablation (Table 2): lambda = 0, no self-debiasing",
                       generation={"task": "sts-x2", "sampling": {"decay_constant": 0.0}})


@register_method("dino-decay200")
def dino_decay200() -> Method:
    return dino_recipe(description="DINO ablation (Table 2): lambda = 200, stronger self-debiasing",
                       generation={"task": "sts-x2", "sampling": {"decay_constant": 200.0}})


@register_method("dino-no-smoothing")
def dino_no_smoothing() -> Method:
    return dino_recipe(description="DINO ablation (Table 2): labels 0 / 0.5 / 1 kept, no label smoothing",
                       postprocess={"label_smoothing": 0.0})


@register_method("dino-no-augmentation")
def dino_no_augmentation() -> Method:
    return dino_recipe(description="DINO ablation (Table 2): no random (x1, x2 of another entry, 0) pairs",
                       postprocess={"random_pairs_per_x1": 0})
