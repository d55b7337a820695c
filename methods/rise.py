"""RISE (COLING 2022, "Reweighting based on Importance of machine-written SEntences"): data made by
DINO's method, each example's loss scaled by how human its x2 looks to a synthetic-data
identification (SDI) classifier, and the paper's two ablations. All four share one cached dataset.

RISE trains the encoder with its own schedule (its Table 9 and ``run_training.py``): 3 epochs,
batch 32, lr 2e-5, evaluated every third of an epoch and at each epoch's end. ``rise-dino`` is
RISE's DINO baseline: the same schedule with every weight 1, the row RISE's tables compare to.

RISE's data protocol (``scripts/0_preprocessing.sh`` and ``preprocess_data.py``: the inputs are a
shuffled set of the split's sentences, at most 10,000; ``scripts/1_generation.sh``: DINO generates a
train file from the train split's sentences and a dev file from the validation split's, both
postprocessed; ``run_training.py`` trains on the whole train file and selects on the dev file). So
every ``rise*`` method generates its own data (not DINO's) and a second, cached dev dataset.
"""

from dsgen.method import Method, register_method
from dsgen.methods.dino import dino_recipe

PAPER = "RISE: COLING 2022"
RISE_TRAINING = {"epochs": 3.0, "evaluations_per_epoch": 3}


RISE_DATA = {"input_sample": 10_000, "dev_inputs": "stsb-validation", "postprocess": {"validation_fraction": 0.0}}


def rise_recipe(**changes) -> Method:
    return dino_recipe(paper=PAPER, trainer_config=RISE_TRAINING, **RISE_DATA, **changes)


@register_method("rise")
def rise() -> Method:
    return rise_recipe(description="RISE: DINO's data, loss x p_D(x2) from an SDI classifier (tau 0.5), 3 epochs",
                       reweighter="sdi")


@register_method("rise-filter")
def rise_filter() -> Method:
    return rise_recipe(description="RISE ablation (Filtering): drop the bottom 10% by p_D, train the rest unweighted",
                       reweighter="sdi", reweighter_config={"filter_fraction": 0.1})


@register_method("rise-random")
def rise_random() -> Method:
    return rise_recipe(description="RISE ablation (Random): weights drawn from U(0, 1) with the run's seed",
                       reweighter="random")


@register_method("rise-dino")
def rise_dino() -> Method:
    return rise_recipe(description="RISE's DINO baseline: DINO's data, every weight 1, RISE's 3-epoch schedule")


@register_method("rise-split-dev")
def rise_split_dev() -> Method:
    """dsgen's earlier RISE protocol, kept as an option: DINO's inputs and 90/10 split (train and dev share x1)."""
    return dino_recipe(paper=PAPER, trainer_config=RISE_TRAINING, reweighter="sdi",
                       description="RISE with the earlier protocol: the first inputs, a 90/10 split of one dataset")
