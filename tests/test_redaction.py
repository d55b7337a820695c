"""Issue 39: credentials never reach a table, report, export or lock file. One redaction function masks every URL
and command line dsgen records or prints (dsgen/redaction.py)."""

from __future__ import annotations

import uuid

import pytest

from dsgen.redaction import command_block, redact_command, redact_url, url_secrets


@pytest.mark.parametrize("url, masked", [
    ("http://u:pw@h:8000/v1", "http://***@h:8000/v1"),
    ("http://h/v1?api_key=abc&api-version=2024-06-01", "http://h/v1?api_key=***&api-version=2024-06-01"),
    ("http://h/v1?bearer=abc", "http://h/v1?bearer=***"),
    ("http://h/v1?jwt=a.b.c", "http://h/v1?jwt=***"),
    ("http://h/v1?pass=abc", "http://h/v1?pass=***"),
    ("http://h/v1?sk=abc", "http://h/v1?sk=***"),
    ("http://h/v1?whatever=abc&model=gpt", "http://h/v1?whatever=***&model=gpt"),
    ("http://h/v1/sk-abcdefgh12345678/x", "http://h/v1/***/x"),
    ("http://h/key/AbCdEfGh0123456789XyZwvu", "http://h/key/***"),
    ("http://h/t/0123456789abcdef0123456789abcdef", "http://h/t/***"),
    ("http://h/openai/deployments/Meta-Llama-3.1-70B-Instruct/v1", "http://h/openai/deployments/Meta-Llama-3.1-70B-Instruct/v1"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("not a url", "not a url"),
])
def test_redact_url_masks_userinfo_every_unknown_query_value_and_token_paths(url, masked):
    assert redact_url(url) == masked
    assert redact_url(masked) == masked  # masking twice changes nothing


def test_a_command_line_is_masked_wherever_its_url_stands():
    secret = f"sk-{uuid.uuid4().hex}"
    for form in (f"--base-url http://u:{secret}@h/v1", f"--base-url=http://h/v1?token={secret}",
                 f"--base-url 'http://h/v1/{secret}'"):
        line = redact_command(f"dsgen compare syncse-partial {form} --preset smoke")
        assert secret not in line and line.startswith("dsgen compare syncse-partial") and "--preset smoke" in line
        assert secret not in "\n".join(command_block(line))
    assert command_block("") == []
    found = url_secrets(f"http://user:pw-long@h/v1/{secret}?x=abcd&model=gpt-4o")
    assert {secret, "pw-long", "abcd", "user"} <= set(found) and "gpt-4o" not in found


def test_no_file_under_out_nor_the_published_copy_holds_a_credential(tmp_path, tiny_encoder_dir, sts_data_dir):
    """(seen) `--base-url http://user:password@host/v1?...` was written in plain text on the Command line of every
    comparison table and its --publish copy. A comparison through a credentialed URL (userinfo, an api_key, a bearer
    and a token in the path): the server gets them; no file under --out, under --publish, nor stdout/stderr holds
    them."""
    from tests.generation.fake_openai_server import FakeOpenAIServer
    from tests.generation.test_openai_api import assert_nowhere
    from tests.test_cli import dsgen

    password, token, bearer = (f"{p}-{uuid.uuid4().hex}" for p in ("pw", "tok", "bear"))
    toml = tmp_path / "tiny.toml"
    toml.write_text(f'data_seeds = [3]\nseeds = [1]\ntasks = ["sts16"]\nmax_inputs = 4\n[generation]\nper_label = 2\n'
                    f'[training]\nencoder = "{tiny_encoder_dir}"\nbatch_size = 8\ndevice = "cpu"\n'
                    f'min_trained_steps = 1\n[training.contrastive]\nbatch_size = 8\n')
    with FakeOpenAIServer() as srv:
        url = srv.url.replace("http://", f"http://dsgen-user:{password}@") + f"?api_key={token}&bearer={bearer}"
        run = dsgen("compare", "syncse-partial", "--preset", str(toml), "--generator", "openai:fake-model",
                    "--base-url", url, "--data-dir", str(sts_data_dir), "--cpus-per-worker", "1", "--quiet",
                    "--out", str(tmp_path / "out"), "--publish", str(tmp_path / "published"), env={"COLUMNS": "1000"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert srv.queries and all(q == {"api_key": token, "bearer": bearer} for q in srv.queries)
    tables = list((tmp_path / "out" / "tables").rglob("*.md"))
    assert tables and "--base-url http://***@" in tables[0].read_text()
    assert assert_nowhere([password, token, bearer], [run.stdout, run.stderr], tmp_path / "out") > 5
    assert assert_nowhere([password, token, bearer], [], tmp_path / "published") >= 1
