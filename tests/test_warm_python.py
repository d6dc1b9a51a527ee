"""A script forked from the warm Python behaves as `python <script>` started fresh: the same exit
status, stdout and stderr for each way a script can end, its argv, environment, working
directory, stdin and import path; a timeout kills it; where the environment differs in what an
imported library read, the caller is sent to a fresh process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ENV, REPO
from tests.warm_python import Client

ENDINGS = {
    "returns": "print('done')",
    "exit_code": "import sys; print('out'); sys.exit(3)",
    "exit_message": "import sys; sys.exit('error: the one line')",
    "exception": "def deep():\n    raise ValueError('bad input')\ndeep()",
    "ctrl_c": "raise KeyboardInterrupt",
    "atexit": "import atexit; atexit.register(lambda: print('at exit'))",
    "thread": (
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('joined'))).start()"
    ),
}
WHO_AM_I = """
import os, sys
from helper_module import NAME
print(sys.argv[1:], os.getcwd(), os.environ["MINIMT_PROBE"], NAME, sys.stdin.read())
"""


@pytest.fixture(scope="module")
def client() -> Client:
    return Client(ENV, REPO)


def fresh(script: Path, *args: str, stdin: bytes = b"", **env: str) -> tuple[int, bytes, bytes]:
    done = subprocess.run(
        [sys.executable, str(script), *args],
        input=stdin,
        capture_output=True,
        env=ENV | env,
        cwd=REPO,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def warm(client: Client, script: Path, *args: str, stdin: bytes = b"", **env: str):
    return client.run([str(script), *args], ENV | env, stdin, prelude="", timeout=60)


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_each_way_a_script_ends_gives_a_fresh_processs_status_and_output(client, tmp_path, ending):
    script = tmp_path / f"{ending}.py"
    script.write_text(ENDINGS[ending] + "\n")
    assert warm(client, script) == fresh(script)


def test_argv_cwd_environment_stdin_and_the_scripts_folder_are_the_fresh_processs(client, tmp_path):
    (tmp_path / "helper_module.py").write_text("NAME = 'beside the script'\n")
    script = tmp_path / "who_am_i.py"
    script.write_text(WHO_AM_I)
    run = (script, "a=1", "b two")
    expected = fresh(*run, stdin=b"from stdin", MINIMT_PROBE="probe")
    assert expected[0] == 0, expected[2]
    assert warm(client, *run, stdin=b"from stdin", MINIMT_PROBE="probe") == expected


def test_a_prelude_runs_before_the_script(client, tmp_path):
    script = tmp_path / "reads.py"
    script.write_text("import json; print(json.dumps(1))\n")
    patched = "import json\njson.dumps = lambda value: 'patched'\n"
    assert client.run([str(script)], ENV, b"", prelude=patched, timeout=60)[1] == b"patched\n"


def test_a_script_past_its_timeout_is_killed_and_the_next_one_runs(client, tmp_path):
    pid_file = tmp_path / "pid"
    script = tmp_path / "sleeps.py"
    script.write_text(
        f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        client.run([str(script)], ENV, b"", prelude="", timeout=2)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    returns = tmp_path / "returns.py"
    returns.write_text("print('done')\n")
    assert warm(client, returns) == (0, b"done\n", b"")


@pytest.mark.parametrize(
    "changed",
    [{"OMP_NUM_THREADS": "2"}, {"PYTHONPATH": "elsewhere"}, {"MINIMT_ALLOCATOR": "mimalloc"}],
)
def test_a_variable_read_at_import_asks_for_a_fresh_process(client, tmp_path, changed):
    script = tmp_path / "returns.py"
    script.write_text("print('done')\n")
    assert client.run([str(script)], ENV | changed, b"", prelude="", timeout=60) is None
    assert client.run([str(script)], ENV | {"MINIMT_PROBE": "x"}, b"", prelude="", timeout=60)
