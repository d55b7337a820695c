"""Every command's ``--help`` as a user sees it: rich renders help text as markup, where ``[ray]`` is a tag
and vanishes ("pip install 'dsgen'"); bracketed text must be escaped to survive."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from dsgen.cli import app

BRACKETED = re.compile(r"\[[^\[\]\s]+\]")


def commands(command, path: tuple[str, ...] = ()):
    """(path, command) for the app and every command and sub-command under it."""
    yield path, command
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from commands(sub, (*path, name))


def written_brackets(command) -> set[str]:
    """The bracketed words the code writes in a command's help (its text and its options'), as the user
    should read them: an escaped ``\\[ray]`` is meant as ``[ray]``."""
    texts = [command.help, command.short_help, command.epilog] + [getattr(p, "help", None) for p in command.params]
    return {b for t in texts if t for b in BRACKETED.findall(t.replace("\\[", "["))}


def test_every_bracketed_word_of_every_help_survives_rendering():
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked = {}
    for path, command in commands(root):
        expected = written_brackets(command)
        if not expected:
            continue
        out = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"}, prog_name="dsgen")
        assert out.exit_code == 0, out.output
        shown = " ".join(out.output.split())
        checked[" ".join(path)] = sorted(b for b in expected if b not in shown)
    assert "compare" in checked and "dsgen[ray]" not in str(checked)  # the Ray backend option is checked
    assert {cmd: lost for cmd, lost in checked.items() if lost} == {}
