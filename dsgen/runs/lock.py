"""One command at a time under an output folder: a lock file, ``<out>/.dsgen.lock``.

Two commands writing under one ``--out`` would delete each other's staging folders (a dataset's ``.partial/`` chunks
that a Ray driver assembles while a local one fills them, a kept model's stage) and interleave their results. So a
runner (:class:`~dsgen.runs.pipeline.Runner`, what every command that runs methods builds first) holds an exclusive
``flock`` on ``<out>/.dsgen.lock`` while it lives, and writes into the file who holds it: pid, host, command and
since when. A second command on the same folder fails at once with one line naming the holder.

The lock belongs to the process: every runner of one process on one folder shares it (tests and the library API make
runners one after the other, and a comparison's driver may make several), and it is let go when the last of them
is closed or collected, or the process ends. The kernel drops a ``flock`` when its process dies, however it dies, so
a lock left by a killed command never blocks the next one; the file itself stays (removing it could let two
commands lock two files of the same name).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError
from dsgen.redaction import redact_command

LOCK_FILE = ".dsgen.lock"

_HELD: dict[str, dict[str, Any]] = {}  # resolved folder -> {"fd", "count", "pid"} of this process
_GUARD = threading.Lock()


def holder(out: Path) -> dict[str, Any]:
    """What the lock file under ``out`` says of its holder (empty when unreadable)."""
    try:
        data = json.loads((Path(out) / LOCK_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _refusal(out: Path) -> DsgenError:
    who = holder(out)
    if not who:
        return DsgenError(f"another dsgen command is writing under {out} (it holds {Path(out) / LOCK_FILE}); wait for "
                          "it to end or choose another --out")
    return DsgenError(f"another dsgen command is writing under {out}: pid {who.get('pid')} on {who.get('host')} "
                      f"(`{who.get('command')}`), since {who.get('since')}; wait for it to end or choose another --out")


def acquire(out: str | Path) -> str:
    """Hold the lock of the output folder ``out`` (created) for this process; returns the name to :func:`release` it
    by. Re-entrant within a process; a folder another process holds raises a one-line :class:`DsgenError` at once."""
    import fcntl

    folder = Path(out)
    name = str(folder.resolve())
    with _GUARD:
        held = _HELD.get(name)
        if held is not None and held["pid"] == os.getpid():
            held["count"] += 1
            return name
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refusal(folder) from None
        except OSError:  # a filesystem without locks: go on unlocked, as before
            os.close(fd)
            _HELD[name] = {"fd": None, "count": 1, "pid": os.getpid()}
            return name
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": redact_command(" ".join(sys.argv) or sys.executable),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        _HELD[name] = {"fd": fd, "count": 1, "pid": os.getpid()}
        return name


def release(name: str) -> None:
    """Let go of one hold of :func:`acquire`; the lock is released with the last."""
    with _GUARD:
        held = _HELD.get(name)
        if held is None or held["pid"] != os.getpid():
            return
        held["count"] -= 1
        if held["count"] > 0:
            return
        del _HELD[name]
        if held["fd"] is not None:
            os.close(held["fd"])  # closing the descriptor releases the flock


__all__ = ["LOCK_FILE", "acquire", "holder", "release"]
