"""Generation: the self-debiasing decode loop and the dataset generators built on it."""
