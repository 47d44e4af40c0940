"""Running code elsewhere: in a new thread (which has no current context)
or in a fresh interpreter with the suite's environment."""
import os
import subprocess
import sys
import textwrap
import threading

# The repository's root (tests.helpers.* import from it in a subprocess)
# and this folder (the plugins' modules import by their bare names).
HELPERS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HELPERS))


# For scripts that fork after cudamem started: Python 3.12 and later warn
# of fork() in a multi-threaded process, which the driver's threads (a GPU
# driver's as well as the simulator's) make every CUDA process.
FORK_WARNING_OFF = (
    "import warnings\n"
    "warnings.filterwarnings('ignore', r'This process \\(pid=\\d+\\) is "
    "multi-threaded', DeprecationWarning)\n")


def in_thread(fn, *args):
    """Runs fn in a new thread (which has no current context) and returns
    its result, re-raising its exception."""
    box = {}

    def run():
        try:
            box["result"] = fn(*args)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter with this suite's environment
    plus `env` (a value of None removes the variable); returns the
    CompletedProcess with text output."""
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=full_env, capture_output=True, text=True,
                          timeout=timeout)
