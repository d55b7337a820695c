"""Issue 39: every input is checked before any long work (one line, exit 2, nothing left behind), and no user-given
name writes outside --out."""

from __future__ import annotations

import json
import shutil

import pytest

from dsgen.errors import DsgenError


def preset_file(tmp_path, text: bytes | str, name: str = "p.toml"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("text, says", [
    ('name = "../../X"\nseeds = [1]\n', "cannot name a folder"),
    ('name = "/abs/X"\nseeds = [1]\n', "cannot name a folder"),
    ('name = ".hidden"\nseeds = [1]\n', "cannot name a folder"),
    ('seeds = [-1]\n', "non-negative"),
    ('seeds = [1]\ndata_seeds = [2, -3]\n', "non-negative"),
    ('seeds = [1]\ndata_seed = -3\n', "non-negative"),
    (b'seeds = [1]\ndescription = "\xff\xfe"\n', "not UTF-8"),
])
def test_a_bad_preset_is_one_line_before_any_work(tmp_path, text, says):
    from dsgen.presets import load_preset

    with pytest.raises(DsgenError, match=says) as err:
        load_preset(str(preset_file(tmp_path, text)))
    assert "\n" not in str(err.value)


def test_a_preset_name_never_writes_outside_out(tmp_path, sts_data_dir):
    """(seen) name = "../../X" wrote results and tables two folders above --out, exit 0; an absolute name crashed
    with a traceback. Now: exit 2, one line, nothing written anywhere."""
    from tests.test_cli import dsgen

    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    for name in ("../../X", str(tmp_path / "abs")):
        toml = preset_file(work, f'name = "{name}"\nseeds = [1]\ntasks = ["sts16"]\n')
        run = dsgen("compare", "base", "--preset", str(toml), "--data-dir", str(sts_data_dir), "--out", str(work / "out"))
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and "cannot name a folder" in run.stderr, run.stderr
        assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "p.toml"]


def test_a_registered_name_that_is_not_a_plain_folder_name_is_refused():
    """A plug-in method's name becomes results/<preset>/<method>/: a path there is refused when it registers."""
    from dsgen.method import METHODS

    for bad in ("../x", "/abs", "a/b", "", " x"):
        with pytest.raises(DsgenError, match="cannot name a folder"):
            METHODS.add(bad, "dsgen.methods.dino:dino")


def test_a_task_spec_that_is_not_utf8_is_one_line(tmp_path):
    from dsgen.taskspec import load_task_spec

    path = tmp_path / "spec.json"
    path.write_bytes(b'{"task_name": "x\xff", "labels": {}}')
    with pytest.raises(DsgenError, match="not UTF-8"):
        load_task_spec(str(path))


def test_a_damaged_encoder_is_refused_before_the_dataset_is_made(tmp_path, tiny_encoder_dir, sts_data_dir):
    """(seen) an encoder folder with corrupted weights gave a raw safetensors traceback after the dataset was
    generated. Now `compare` refuses it in one line before anything runs, and `eval` says the same in one line."""
    from tests.test_cli import dsgen

    enc = tmp_path / "enc"
    shutil.copytree(tiny_encoder_dir, enc)
    weights = next(enc.rglob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:100])
    toml = preset_file(tmp_path, f'seeds = [1]\ntasks = ["sts16"]\nmax_inputs = 4\n[training]\nencoder = "{enc}"\n')
    run = dsgen("compare", "dino", "--preset", str(toml), "--data-dir", str(sts_data_dir), "--out", str(tmp_path / "o"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "damaged or unreadable" in run.stderr, run.stderr
    assert not (tmp_path / "o").exists()
    ev = dsgen("eval", str(enc), "--tasks", "sts16", "--data-dir", str(sts_data_dir))
    assert ev.returncode == 2 and ev.stderr.count("\n") == 1 and "damaged or unreadable" in ev.stderr, ev.stderr


@pytest.mark.parametrize("where", ["tokenizer_config.json", "nested", "module"])
def test_remote_code_named_anywhere_in_a_folder_is_not_trusted(tmp_path, tiny_encoder_dir, where):
    """The trust_remote_code guard read auto_map only in the top-level config.json: a tokenizer_config.json, a
    nested config (text_config) or a module's own config naming code now counts as the model's own code."""
    from dsgen.encoders import dsgen_modules_only

    folder = tmp_path / "m"
    shutil.copytree(tiny_encoder_dir, folder)
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                      "type": "sentence_transformers.models.Transformer"}]))
    assert dsgen_modules_only(folder)
    code = {"auto_map": {"AutoModel": "evil.Model"}}
    if where == "tokenizer_config.json":
        cfg = json.loads((folder / "tokenizer_config.json").read_text()) if (folder / "tokenizer_config.json").exists() else {}
        (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, **code}))
    elif where == "nested":
        cfg = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**cfg, "text_config": code}))
    else:
        (folder / "1_Module").mkdir()
        (folder / "1_Module" / "config.json").write_text(json.dumps(code))
    assert not dsgen_modules_only(folder)


def test_generate_never_writes_over_its_inputs_or_a_file_it_did_not_write(tmp_path):
    """(seen) `dsgen generate --inputs in.txt --out in.txt` replaced the user's inputs with pairs, exit 0. Now the
    inputs file, or any file without dsgen's sidecar, is refused in one line before anything loads (exit 2, the file
    unchanged) unless --overwrite names it; dsgen's own earlier output is replaced as before."""
    from dsgen.api import generate
    from dsgen.artifacts import check_replaceable_file, write_sidecar
    from tests.test_cli import dsgen

    inputs = tmp_path / "in.txt"
    inputs.write_text("A man is playing a guitar.\nA dog runs.\n")
    run = dsgen("generate", "--inputs", str(inputs), "--out", str(inputs), "--decay", "0")
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "own input" in run.stderr, run.stderr
    assert inputs.read_text() == "A man is playing a guitar.\nA dog runs.\n"
    theirs = tmp_path / "notes.jsonl"
    theirs.write_text("mine\n")
    with pytest.raises(DsgenError, match="dsgen did not write it"):
        generate(inputs=str(inputs), out=theirs, decay=0)
    assert theirs.read_text() == "mine\n"
    assert check_replaceable_file(theirs, overwrite=True) == theirs
    write_sidecar(theirs, kind="generated-pairs")
    assert check_replaceable_file(theirs, overwrite=False) == theirs  # dsgen's own: replaced as before


def test_a_kill_between_sidecar_and_pairs_never_leaves_old_pairs_under_a_new_sidecar(tmp_path, monkeypatch):
    from dsgen.data import pairs as module
    from dsgen.data.pairs import Pair, read_pairs, write_dataset

    out = tmp_path / "p.jsonl"
    write_dataset(out, [Pair("a", "b", 1.0)], kind="generated-pairs", dataset_key="old")
    assert [p.text_a for p in read_pairs(out)] == ["a"]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "write_pairs", killed)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(out, [Pair("c", "d", 0.0)], kind="generated-pairs", dataset_key="new")
    assert not out.exists()  # the new sidecar stands alone: an incomplete dataset, made again on the next run
    assert json.loads((tmp_path / "p.jsonl.meta.json").read_text())["dataset_key"] == "new"


def test_every_command_that_trains_uses_one_thread_count(tmp_path):
    """(seen) `OMP_NUM_THREADS=1 dsgen analyze rise` keyed its runs by torch's thread count while `compare` used
    --cpus-per-worker's default (2): analyze retrained RISE under another key. Now the runner of every command
    (prepare: run, compare, analyze, regress; a reading runner: export) computes with the same default count."""
    import torch

    from dsgen.api.common import RunSettings
    from dsgen.orchestration import prepare
    from dsgen.runs.pipeline import Runner
    from dsgen.runs.records import DEFAULT_THREADS

    before = torch.get_num_threads()
    torch.set_num_threads(1 if before != 1 else 3)
    try:
        analyze_like = prepare(["base"], "smoke", out=tmp_path / "a", progress=False)
        compare_like = RunSettings(preset="smoke", out=tmp_path / "c", progress=False).prepare(["base"], None)
        with Runner(tmp_path / "e", makes=(), lock=False) as reader:
            threads = {analyze_like.runner.data.training_threads(), compare_like.runner.data.training_threads(),
                       reader.data.training_threads()}
        assert threads == {DEFAULT_THREADS}
    finally:
        torch.set_num_threads(before)
