"""The ``compact`` and ``voxlake`` console scripts: the Rust command lines, run in this process.

The wheel installs them (``[project.scripts]`` in pyproject.toml); they parse, print, fail and
exit as the Rust binaries do.
"""

import signal
import sys

from ._voxlake import run_command


def _run(name: str) -> None:
    # As in the binaries, Ctrl-C ends the process (a conversion resumes from its last commit;
    # `voxlake bench` installs its own handler to write its state first). Python's handler
    # would only set a flag that nothing reads while the command runs in Rust.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(run_command(name, sys.argv))


def compact() -> None:
    """``compact``: convert ``.npy`` blobs into a Delta table, optimize it, inspect it."""
    _run("compact")


def voxlake() -> None:
    """``voxlake``: ``voxlake bench TABLE`` measures the loader over a table."""
    _run("voxlake")
