"""``human``: the reference row. The same encoder and trainer as DINO, trained on as many
human-labelled STS benchmark train pairs (gold / 5) as DINO's postprocessed dataset holds under
the same preset and seed. It is the ceiling generated data is read against (DINO's Table 1 puts
supervised rows beside its own) and the control that the encoder and trainer learn at all.
"""

from dsgen.method import Method, register_method


@register_method("human")
def human() -> Method:
    return Method(description="human-labelled STSb train pairs (gold / 5), as many as DINO's dataset, DINO's trainer",
                  paper="reference (DINO Table 1's supervised rows)", generator="human",
                  generation={"source": "stsb-train"}, size_of="dino",
                  postprocess={"remove_identical": False, "remove_duplicates": False, "max_per_x1_label": 0,
                               "label_smoothing": 0.0, "random_pairs_per_x1": 0, "stratify": False},
                  trainer="regression")
