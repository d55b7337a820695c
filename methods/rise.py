"""RISE (COLING 2022, "Reweighting based on Importance of machine-written SEntences"): DINO's data
and training, each example's loss scaled by how human its x2 looks to a synthetic-data
identification (SDI) classifier, and the paper's two ablations. All three reuse DINO's cached
dataset: only the reweighter differs from ``dino``.
"""

from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe

PAPER = "RISE: COLING 2022"


@register_method("rise")
def rise() -> Method:
    return dino_recipe(description="RISE: DINO's data, loss x p_D(x2) from an SDI classifier (tau 0.5)",
                       paper=PAPER, reweighter="sdi")


@register_method("rise-filter")
def rise_filter() -> Method:
    return dino_recipe(description="RISE ablation (Filtering): drop the bottom 10% by p_D, train the rest unweighted",
                       paper=PAPER, reweighter="sdi", reweighter_config={"filter_fraction": 0.1})


@register_method("rise-random")
def rise_random() -> Method:
    return dino_recipe(description="RISE ablation (Random): weights drawn from U(0, 1) with the run's seed",
                       paper=PAPER, reweighter="random")
