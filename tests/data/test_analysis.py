import pytest

from dsgen.data.analysis import bleu, distinct, jaccard, rise_table, tokens, zipf_coefficient


def test_metrics_on_hand_checked_examples():
    assert tokens("A man, plays!") == ["a", "man", ",", "plays", "!"]
    assert bleu("a man plays a guitar .", "a man plays a guitar .", 4) == pytest.approx(100)
    assert bleu("x y z", "a b c", 1) == pytest.approx(0, abs=1e-6)
    assert jaccard("a b c", "b c d") == pytest.approx(50)
    assert distinct(["a a a", "a b"], 1) == pytest.approx(100 * 2 / 5)
    assert distinct(["a b c"], 2) == pytest.approx(100)
    # counts 12, 6, 4, 3 = 12 / rank: log-log slope -1 exactly
    text = " ".join(["a"] * 12 + ["b"] * 6 + ["c"] * 4 + ["d"] * 3)
    assert zipf_coefficient([text]) == pytest.approx(1.0)


def test_rise_table_groups_by_importance():
    machine = [(f"m{i} word", "human sentence", i / 100) for i in range(100)]
    machine[-1] = ("human sentence", "human sentence", 1.0)
    table = rise_table(machine, [("human sentence", "human phrase")])
    assert list(table["n"]) == [1, 10, 10]
    assert table.iloc[1]["Jaccard"] > table.iloc[2]["Jaccard"]
