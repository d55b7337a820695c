"""``dsgen`` commands run by the tests, each in a process of its own, without paying the libraries' import every time.

A command's process imports torch, transformers and sentence-transformers before its first line of work: about
8 seconds on 2 cores, most of the time of a command that stops on bad input or reads runs made earlier. The tests run
a few hundred commands. So a server process imports those libraries and dsgen's command line once (and nothing
else: it runs no torch operation and starts no thread), and every command is a ``fork()`` of it: a new process that
changes into the command's folder, takes the command's environment and arguments, runs ``dsgen.cli.main()`` with its
output going to files, runs its exit handlers and exits with the command's code. The test sees what a subprocess
shows: exit code, stdout, stderr, a timeout that kills the process group.

What a fork cannot change is what was read while the libraries were imported (``HF_HUB_OFFLINE`` is read by
``huggingface_hub`` at import, ``PYTHONHASHSEED`` at interpreter start). So a server serves only commands whose
environment equals its own but for the variables read when a command runs (``RUNTIME_ENV``); a command in another
environment gets a server started in that one (the least recently used of ``MAX_SERVERS`` is stopped).

A fork also finds modules imported that a new process would import only when asked: a command that used a module it
never imported would pass here and fail for a user. The tests that start the real command (``python -m dsgen.cli``,
the installed ``dsgen`` script of tests/test_install.py) cover that.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

# read when a command runs, never at import, so a fork may take them from the command's environment: dsgen's own,
# the OpenAI client's, rich's terminal size, pytest's test name, and torch's compile cache (which torch sets in the
# tests' process the first time it compiles)
RUNTIME_ENV = ("DSGEN_DATA_DIR", "DSGEN_CACHE_DIR", "OPENAI_API_KEY", "OPENAI_BASE_URL", "COLUMNS", "LINES",
               "PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR",
               # set by polars when imported (mteb imports it) and read as polars loads its library, which the server
               # never imports: a test that loaded MTEB's results must not cost a server
               "_RJEM_MALLOC_CONF")
# The offline environment of the commands that must not reach the Hugging Face hub (loaders of `datasets`, MTEB's,
# the hub's): one set of variables for all of them, so that they share one server.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
ROOT = Path(__file__).resolve().parents[1]


def _differs(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


class ForkServer:
    """One server process (started on the first command, stopped when the tests end) that forks a command per request."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="dsgen-cli-"))
        self.socket = self.folder / "s"
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-c", "import sys; from tests.cli_process import serve; serve(sys.argv[1])",
                                      str(self.socket)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"the dsgen fork server did not start (exit {self.proc.wait()})")
        # what the imports set (sklearn and joblib: KMP_INIT_AT_FORK, ...), as they set it in any new process
        self.set_by_imports = {k: v for k, v in json.loads(line[len("ready "):]).items() if k not in env}
        atexit.register(self.stop)

    def can_run(self, env: dict[str, str]) -> bool:
        """Whether a fork behaves as a new process would with ``env``: the two agree on every variable read at import."""
        return self.proc.poll() is None and _differs(self.command_env(env), {**self.env, **self.set_by_imports}) <= set(RUNTIME_ENV)

    def command_env(self, env: dict[str, str]) -> dict[str, str]:
        """The environment of a new process started with ``env`` once it has imported the libraries."""
        return {**self.set_by_imports, **env}

    def run(self, args: list[str], env: dict[str, str], cwd, timeout: float) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory(dir=self.folder) as d:
            out, err = Path(d) / "stdout", Path(d) / "stderr"
            request = {"args": args, "env": env, "cwd": str(Path(cwd or os.getcwd()).resolve()), "stdout": str(out),
                       "stderr": str(err)}
            with socket.socket(socket.AF_UNIX) as conn:
                conn.connect(str(self.socket))
                conn.sendall((json.dumps(request) + "\n").encode())
                reply = conn.makefile()
                pid = int(reply.readline())
                conn.settimeout(timeout)
                try:
                    line = reply.readline()
                except TimeoutError:
                    os.killpg(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired(args, timeout) from None
            return subprocess.CompletedProcess([sys.executable, "-m", "dsgen.cli", *args], int(line),
                                               out.read_text(errors="replace"), err.read_text(errors="replace"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


# one server per environment the tests run commands in (most run in the tests' own, some offline with HF_HUB_OFFLINE=1,
# a few with a hash seed), least recently used first
_SERVERS: list[ForkServer] = []
MAX_SERVERS = 4


def run_dsgen(args, env=None, cwd=None, timeout=900) -> subprocess.CompletedProcess:
    """``python -m dsgen.cli ARGS`` with ``env`` added to this process's environment, run in ``cwd``: its exit code,
    stdout and stderr (text); a fork of the server where the environment allows, else a new interpreter."""
    from dsgen.cli import quiet_libraries

    args = [str(a) for a in args]
    full = {**os.environ, **(env or {})}
    quiet_libraries(full)  # what the command sets first, before its imports (the server did the same)
    server = next((s for s in _SERVERS if s.can_run(full)), None)
    if server is None:
        if len(_SERVERS) == MAX_SERVERS:
            _SERVERS.pop(0).stop()
        server = ForkServer(full)
    else:
        _SERVERS.remove(server)
    _SERVERS.append(server)
    return server.run(args, server.command_env(full), cwd, timeout)


def _run_command(request: dict) -> None:
    """In the forked process: become the command, run it, exit with its code (never returns)."""
    import atexit as exits
    import traceback

    os.setpgid(0, 0)  # a timeout kills the command and whatever it started
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(handle, fd)
            os.close(handle)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [str(ROOT / "dsgen" / "cli" / "__main__.py"), *request["args"]]
        from dsgen.cli import main

        try:
            main()
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:  # sys.exit("message"), as the interpreter does: the message on stderr, exit 1
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        exits._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str) -> None:
    """The server: import the libraries a command needs, then fork one process per request, one at a time."""
    import sentence_transformers  # noqa: F401  (torch and transformers with it)
    import dsgen.api  # noqa: F401
    import dsgen.cli  # noqa: F401
    import dsgen.encoders  # noqa: F401
    import dsgen.evaluation.evaluator  # noqa: F401
    import dsgen.orchestration  # noqa: F401

    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        print("ready " + json.dumps(dict(os.environ)), flush=True)
        while True:
            conn, _ = server.accept()
            with conn:
                request = json.loads(conn.makefile().readline())
                pid = os.fork()
                if pid == 0:
                    server.close()
                    conn.close()
                    _run_command(request)
                try:
                    os.setpgid(pid, pid)  # here too, so that the group exists before the test may kill it
                except OSError:  # the command set it first, or has ended already
                    pass
                conn.sendall(f"{pid}\n".encode())
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:  # the test gave up on it (timeout)
                    pass
