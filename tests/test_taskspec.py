import json

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
    from tests.cli_process import run_dsgen

    proc = run_dsgen(["generate", "--task", path, "--inputs", inputs, "--out", out])
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr
    assert not out.exists()


CHAT = {"task_name": "chat", "chat": True, "system": "You write sentences.",
        "labels": {"1": {"instruction": 'Write the same as "<X1>".\nSentence: "', "counter_labels": []},
                   "0": {"instruction": 'Write something unrelated to "<X1>".\nSentence: "', "counter_labels": ["1"]}}}


def chat_tokenizer():
    from tests.conftest import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.chat_template = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]{% endif %}")
    return tok


def test_a_chat_spec_renders_turns_through_the_tokenizers_template(tmp_path):
    spec = load_task_spec(write(tmp_path, CHAT), with_inputs=True)
    assert spec.chat and spec.to_dict()["chat"] is True and spec.to_dict()["system"] == "You write sentences."
    messages, opening = spec.turns("0", "A dog runs.")
    assert messages == [{"role": "system", "content": "You write sentences."},
                        {"role": "user", "content": 'Write something unrelated to "A dog runs.".'}]
    assert opening == 'Sentence: "'
    assert spec.prompt("0", "A dog runs.", chat_tokenizer()) == (
        '[system]You write sentences.\n[user]Write something unrelated to "A dog runs.".\n[assistant]Sentence: "')
    with pytest.raises(DsgenError, match="asks for a chat template"):
        spec.prompt("0", "A dog runs.", build_char_tokenizer_without_template())
    assert load_task_spec("sts-x2").to_dict().get("chat") is None  # DINO's format is unchanged
    for broken, fragment in (({**CHAT, "chat": "yes"}, "'chat' must be true or false"),
                             ({**CHAT, "chat": False}, "only a chat spec"),
                             ({**CHAT, "labels": {"1": {"instruction": 'Same as "<X1>": "'}}}, "last line break")):
        with pytest.raises(DsgenError, match=fragment):
            load_task_spec(write(tmp_path, broken), with_inputs=True)


def build_char_tokenizer_without_template():
    from tests.conftest import build_char_tokenizer

    return build_char_tokenizer()


def test_chat_prompted_generation_debiases_through_the_same_template(tmp_path, tiny_lm):
    """The main and counter rows of a chat spec are rendered by the same template: the counter prompt
    of label 0 is label 1's chat prompt, and the core decodes them as it decodes DINO's."""
    from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
    from dsgen.models import LoadedLM

    lm = LoadedLM(tiny_lm.model, chat_tokenizer(), "tiny-chat", "test", 0.0, False)
    path = write(tmp_path, CHAT)
    gen = DebiasedGenerator(GenerationConfig.from_dict({"task": path, "generator": "tiny-chat", "device": "cpu",
                                                        "per_label": 2, "sampling": {"max_new_tokens": 6}}), lm=lm)
    spec = gen.spec(with_inputs=True)
    (chunk,) = gen.chunks(spec, ["A dog runs."])
    by_label = {i.label: i.request for i in chunk.items}
    assert by_label["0"].prompt.startswith("[system]") and by_label["0"].prompt.endswith('[assistant]Sentence: "')
    assert by_label["0"].counter_prompts == (by_label["1"].prompt,)
    gen.generate(["A dog runs."], tmp_path / "out.jsonl", progress=False)
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["task_spec"]["chat"] is True and meta["stats"]["sampled"] == 4
