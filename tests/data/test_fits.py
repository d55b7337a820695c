"""The data-level fit mechanism (dsgen.data.fits): a stage's fit stored once per key with its record written
last, loaded back as the stage uses it; what a fit reads of a generated dataset does not depend on the
training seed."""

import json

import pytest

from dsgen.data.fits import DataFit, FitData, FitStore, FitsOnData, filter_settings, seed_free_pairs
from dsgen.data.pairs import Pair
from dsgen.data.postprocess import PostprocessConfig, postprocess


class CountingStage(FitsOnData):
    """A stage whose fit is the number of inputs it read, written to a file."""

    computed = 0

    def data_fit(self):
        return DataFit("count", {"what": "inputs"}, ("inputs",), self.compute, self.load)

    def compute(self, data, folder):
        CountingStage.computed += 1
        (folder / "count.txt").write_text(str(len(data.inputs)))
        return {"seed": data.seed}

    def load(self, folder, info):
        return int((folder / "count.txt").read_text())


def test_a_fit_is_stored_once_with_its_record_last_and_loaded_back(tmp_path):
    stage, store = CountingStage(), FitStore(tmp_path / "fits")
    fit = stage.data_fit()
    assert not store.complete("count", "k1")
    record = store.make(fit, "k1", FitData(seed=3, inputs=["a", "b"]), {"seed": 3})
    assert store.complete("count", "k1") and record["info"] == {"seed": 3} and record["key"] == "k1"
    assert sorted(p.name for p in store.folder("count", "k1").iterdir()) == ["count.txt", "fit.json"]
    assert not [p for p in (tmp_path / "fits").iterdir() if p.name.startswith(".")]  # no temporary folder left
    fitted = store.load(fit, "k1")
    assert fitted.value == 2 and fitted.info == {"seed": 3} and fitted.summary()["key"] == "k1"
    folder = store.folder("count", "k2")  # an interrupted write: files without fit.json are not a fit
    folder.mkdir()
    (folder / "count.txt").write_text("99")
    assert not store.complete("count", "k2")
    store.make(fit, "k2", FitData(seed=3, inputs=["a"]), {})
    assert store.load(fit, "k2").value == 1
    (store.folder("count", "k2") / "fit.json").write_text(json.dumps({"key": "other"}))
    assert not store.complete("count", "k2")  # a record naming another key is not this fit


def test_a_failed_compute_leaves_nothing(tmp_path):
    def broken(data, folder):
        (folder / "half.bin").write_bytes(b"x")
        raise RuntimeError("out of memory")

    store = FitStore(tmp_path / "fits")
    with pytest.raises(RuntimeError):
        store.make(DataFit("x", {}, ("inputs",), broken, lambda f, i: None), "k", FitData(seed=1, inputs=[]), {})
    assert not store.complete("x", "k") and list((tmp_path / "fits").iterdir()) == []


def test_a_stage_used_alone_fits_in_place_and_reads_are_checked():
    CountingStage.computed = 0
    fitted = CountingStage().fit_alone(FitData(seed=1, inputs=["a", "b", "c"]))
    assert fitted.value == 3 and CountingStage.computed == 1
    with pytest.raises(ValueError, match="reads must be some of"):
        DataFit("x", {}, ("labels",), lambda d, f: {}, lambda f, i: None)


def test_the_generated_read_is_the_seed_free_filters_of_postprocessing():
    """The pairs a fit reads are DINO's filters 1-3 (identical, duplicates, cap per (x1, y)) in generation order,
    whatever the postprocessing seed, split, augmentation or smoothing; and exactly the generated pairs that
    postprocessing keeps."""
    pairs = [Pair("a", "a", 1.0), Pair("a", "b", 1.0), Pair("a", "b", 1.0), Pair("a", "c", 1.0), Pair("a", "d", 1.0),
             Pair("a", "e", 0.0), Pair("b", "f", 0.5), Pair("b", "g", 0.0)]
    cfg = PostprocessConfig(seed=1)
    kept = seed_free_pairs(pairs, cfg)
    assert [(p.text_a, p.text_b) for p in kept] == [("a", "b"), ("a", "c"), ("a", "e"), ("b", "f"), ("b", "g")]
    assert kept == seed_free_pairs(pairs, cfg.replace(seed=2, validation_fraction=0.3, label_smoothing=0.1))
    train, validation = postprocess(pairs, cfg)
    assert {(p.text_a, p.text_b) for p in train + validation if p.extra["source"] == "generated"} == \
        {(p.text_a, p.text_b) for p in kept}
    assert seed_free_pairs(pairs, None) == pairs
    assert filter_settings(cfg) == {"remove_identical": True, "drop_containing": "", "remove_duplicates": True,
                                    "max_per_x1_label": 2}
