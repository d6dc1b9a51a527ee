"""A warm Python for the tests' script runs: one process per pytest worker imports the heavy
third-party libraries once (torch with its compiler stack, Hydra, sacreBLEU, tokenizers,
TensorBoard, matplotlib's Agg figures), then forks a child for each script run, which runs it
as `python <script> <args>` would: its own argv, environment, working directory, stdin, stdout
and stderr, exit status, and the exit of an uncaught exception or KeyboardInterrupt. A fresh
interpreter spends 3-5 s importing those libraries; a forked child has them already.

minimt itself is not imported ahead: a script's own imports run in the child as they would in a
fresh process. An environment variable that a preloaded library reads at import (OMP_*,
PYTHON*, ...) needs a fresh process: `Client.run` returns None when any variable other than
MINIMT_* and HYDRA_FULL_ERROR differs from the warm process's, and the caller starts one.

Protocol (JSON lines): the client writes a request; the server forks, answers {"pid": ...} and,
once the child exits, {"returncode": ...} (negative: the signal that ended it, as subprocess)."""

import atexit
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

PRELOADED = [
    "torch",
    "torch._dynamo",  # torch.optim's step imports it
    "torch.utils.tensorboard",
    "hydra",
    "hydra.main",
    "omegaconf",
    "sacrebleu",
    "tokenizers",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
]
# Read by minimt and Hydra when a script runs, not when a library is imported.
READ_AT_RUN = ("MINIMT_", "HYDRA_FULL_ERROR")
# Any other allocator re-executes the interpreter with the command line that started it.
ALLOCATOR = ("MINIMT_ALLOCATOR", "system")


def serve() -> None:
    """Import PRELOADED, then run each request read from stdin in a forked child."""
    for name in PRELOADED:
        __import__(name)
    requests, answers = sys.stdin.buffer, os.fdopen(os.dup(1), "w")
    if len(os.listdir("/proc/self/task")) != 1:  # a thread started by an import: no safe fork
        answers.write(json.dumps({"refused": "the preloaded libraries started a thread"}) + "\n")
        return
    for line in requests:
        request = json.loads(line)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            os.close(answers.fileno())
            run_child(**request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


def run_child(
    argv: list[str], env: dict, cwd: str, stdin: str, stdout: str, stderr: str, prelude: str
) -> None:
    """Run the script argv[0] with argv[1:] as `python` would, then exit this process."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path, mode in [
        (0, stdin, os.O_RDONLY),
        (1, stdout, os.O_WRONLY),
        (2, stderr, os.O_WRONLY),
    ]:
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    sys.stdin = sys.__stdin__ = open(
        0, encoding=sys.stdin.encoding, errors=sys.stdin.errors, closefd=False
    )
    script = str(Path(argv[0]).resolve())
    sys.argv, sys.path[0] = list(argv), str(Path(script).parent)
    os._exit(exit_status(script, prelude))


def exit_status(script: str, prelude: str) -> int:
    """Run `prelude` and then `script` as __main__; the exit status the interpreter would give,
    after joining non-daemon threads, the atexit handlers and the flush of stdout and stderr."""
    status = 0
    try:
        exec(compile(prelude, "<prelude>", "exec"), {"__name__": "__prelude__"})
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        status = system_exit_status(exit.code)
    except BaseException as error:  # noqa: BLE001 - reported as the interpreter reports it
        traceback.print_exception(type(error), error, from_script(error.__traceback__, script))
        status = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = 120
    if status == -signal.SIGINT:  # Python ends on an uncaught KeyboardInterrupt by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def system_exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def from_script(tb, script: str):
    """The traceback from the script's first frame on (runpy's and this module's left out), or
    all of it where the script has no frame in it."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != script:
        start = start.tb_next
    return start or tb


class Client:
    """One warm process, started at the first run; `run` returns None where a fresh process is
    needed (another run in flight, an environment variable read at import differs)."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = dict(env), cwd
        self.lock = threading.Lock()
        self.server: subprocess.Popen | None = None
        self.refused = False

    def run(
        self, argv: list[str], env: dict[str, str], stdin: bytes, prelude: str, timeout: float
    ) -> tuple[int, bytes, bytes] | None:
        """(returncode, stdout, stderr) of `python argv...` with `env`, `stdin` and `prelude` run
        first, or None where it needs a fresh process; subprocess.TimeoutExpired after
        `timeout` seconds, the child killed."""
        if not self.forkable(env) or not self.lock.acquire(blocking=False):
            return None
        try:
            with tempfile.TemporaryDirectory(prefix="warm-python-") as folder:
                files = {name: Path(folder, name) for name in ("stdin", "stdout", "stderr")}
                files["stdin"].write_bytes(stdin)
                for output in ("stdout", "stderr"):
                    files[output].touch()
                request = {"argv": argv, "env": env, "cwd": str(self.cwd), "prelude": prelude}
                returncode = self.exchange(request | {k: str(p) for k, p in files.items()}, timeout)
                if returncode is None:
                    return None
                return returncode, files["stdout"].read_bytes(), files["stderr"].read_bytes()
        finally:
            self.lock.release()

    def forkable(self, env: dict[str, str]) -> bool:
        if self.refused or env.get(ALLOCATOR[0]) != ALLOCATOR[1]:
            return False
        keys = set(env) | set(self.env)
        differing = [key for key in keys if env.get(key) != self.env.get(key)]
        return all(key.startswith(READ_AT_RUN) for key in differing)

    def exchange(self, request: dict, timeout: float) -> int | None:
        """Send `request`; the child's returncode, or None where the server refused to fork."""
        server = self.start()
        server.stdin.write(json.dumps(request).encode() + b"\n")
        server.stdin.flush()
        started = self.answer(server)
        if "refused" in started:
            self.refused = True
            return None
        ended = self.answer(server, timeout)
        if ended is None:
            os.kill(started["pid"], signal.SIGKILL)
            self.answer(server)  # the killed child's end
            raise subprocess.TimeoutExpired(request["argv"], timeout)
        return ended["returncode"]

    @staticmethod
    def answer(server: subprocess.Popen, timeout: float | None = None) -> dict | None:
        """The server's next answer, or None when `timeout` seconds pass without one."""
        if timeout is not None and not select.select([server.stdout], [], [], timeout)[0]:
            return None
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm Python ended (exit status {server.wait()})")
        return json.loads(line)

    def start(self) -> subprocess.Popen:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen(
                [sys.executable, "-c", "from tests.warm_python import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # one answer line at a time, none left in a buffer select cannot see
                env=self.env,
                cwd=self.cwd,
            )
            atexit.register(self.server.kill)
        return self.server
