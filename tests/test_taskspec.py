import json
import subprocess
import sys

import pytest

from dsgen.errors import DsgenError
from dsgen.taskspec import load_task_spec

GOOD = {"task_name": "t", "labels": {"a": {"instruction": 'X "<X1>" Y "', "counter_labels": ["b"]},
                                      "b": {"instruction": 'Z "<X1>" W "', "counter_labels": []}}}


def test_builtin_specs_load():
    x2 = load_task_spec("sts-x2", with_inputs=True)
    assert x2.labels == ["1", "0.5", "0"]
    assert x2.counter_labels == {"1": (), "0.5": ("1",), "0": ("1", "0.5")}  # CL(y) = {y' > y}
    assert x2.prompt("1", "A cat.").endswith('Sentence 1: "A cat."\nSentence 2: "')
    x1 = load_task_spec("sts-x1", with_inputs=False)
    assert not x1.needs_inputs
    gense = load_task_spec("gense", with_inputs=True)
    assert gense.counter_labels == {"entailment": ("contradiction",), "contradiction": ("entailment",)}
    assert "are entailment." in gense.instructions["entailment"]
    assert "are contradictory." in gense.instructions["contradiction"]


def write(tmp_path, text):
    p = tmp_path / "spec.json"
    p.write_text(text if isinstance(text, str) else json.dumps(text))
    return str(p)


@pytest.mark.parametrize("spec, with_inputs, fragment", [
    ("{not json", True, "invalid JSON"),
    ({"task_name": "t", "labels": {}}, True, "no labels"),
    ({"task_name": "t"}, True, "no labels"),
    ({"labels": {"a": {"instruction": 'no placeholder "'}}}, True, "no <X1> placeholder"),
    ({"labels": {"a": {"instruction": 'has "<X1>" "'}}}, False, "no inputs were given"),
    ({"labels": {"a": {"instruction": '"<X1>" "', "counter_labels": ["zzz"]}}}, True, "counter label 'zzz'"),
    ({"labels": {"a": {"instruction": '"<X1>" no quote at end'}}}, True, "opening quotation mark"),
    ({"labels": {"a": {"instruction": 'S: "<X1>"'}}}, True, "opening quotation mark"),
])
def test_bad_specs(tmp_path, spec, with_inputs, fragment):
    with pytest.raises(DsgenError, match=fragment):
        load_task_spec(write(tmp_path, spec), with_inputs=with_inputs)


def test_good_custom_spec(tmp_path):
    spec = load_task_spec(write(tmp_path, GOOD), with_inputs=True)
    assert spec.prompt("a", "q") == 'X "q" Y "'
    assert spec.without_counter_labels().counter_labels == {"a": (), "b": ()}


def test_cli_bad_spec_one_line_exit_2(tmp_path):
    path = write(tmp_path, {"labels": {"a": {"instruction": '"<X1>"', "counter_labels": []}}})
    inputs = tmp_path / "in.txt"
    inputs.write_text("A sentence.\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, "-m", "dsgen.cli", "generate", "--task", path, "--inputs", str(inputs),
                           "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr
    assert not out.exists()
