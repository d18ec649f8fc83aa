"""One piece of the search run in a forked child process while the parent does another (planner/seeded.py: the node
groups searched alone while the fleet's candidates are listed).

Both are pure Python for the most part, so threads would take turns on the interpreter's lock; a child process has its
own and uses the second core the 2-core CI machine has (docs/planner.md, "Performance"). The child is a fork: it starts
at once with the parent's memory (imports, the cost cache) and returns its result through a pipe, pickled. The result
is what the function returns in the parent: it is a function of its inputs only (the searches are deterministic), and
where the child cannot give it (no fork on the platform, the child failed or ended without its result, or it ran past
its time) the parent calls the function itself, so every path returns the same thing, or raises the same error.

The child writes nothing to stdout or stderr (its own streams, and warnings, go nowhere) and ends with os._exit: a
thread of the parent (the progress display) may hold a stream's lock at the fork, and the child would wait for it
forever. It leaves Ctrl-C to the default action (the CLI's handler works through a thread the child does not have)
and dies with its parent.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sys
import time
import warnings
from typing import Callable, Generic, TypeVar

T = TypeVar("T")

FORK = sys.platform.startswith("linux") and hasattr(os, "fork")
"""Where a child is forked: Linux. Elsewhere (macOS' system libraries are not safe to use after a fork; Windows has no
fork) the parent calls the function itself when it asks for the result."""
PR_SET_PDEATHSIG = 1
"""prctl(2): the signal the child gets when its parent ends."""


class Beside(Generic[T]):
    """fn() in a forked child from construction on, its value in the parent by result(); close() ends the child if it
    still runs. `fork`: False runs fn in the parent, at result()."""

    def __init__(self, fn: Callable[[], T], *, fork: bool = True):
        self._fn, self._pid, self._fd = fn, 0, -1
        if not (fork and FORK):
            return
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(read_fd)
            _child(fn, write_fd, parent)
        os.close(write_fd)
        self._pid, self._fd = pid, read_fd

    @property
    def forked(self) -> bool:
        """Whether a child is computing the result."""
        return self._pid > 0

    def result(self, wait_s: float = float("inf")) -> T:
        """fn()'s value: the child's, if it sends it within wait_s seconds, else computed here."""
        data = self._read(wait_s) if self.forked else None
        self.close()
        try:
            status, value = pickle.loads(data) if data is not None else ("failed", None)
        except Exception:  # cut short: the child was killed while it wrote
            status, value = "failed", None
        return value if status == "ok" else self._fn()

    def close(self) -> None:
        """End the child (if it still runs) and reap it."""
        if not self.forked:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(self._pid, 0)
        except ChildProcessError:  # reaped elsewhere
            pass
        os.close(self._fd)
        self._pid, self._fd = 0, -1

    def _read(self, wait_s: float) -> bytes | None:
        """Everything the child wrote, or None if it sent nothing whole before wait_s seconds passed."""
        chunks, until = [], time.monotonic() + wait_s
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return None
            if not select.select([self._fd], [], [], min(left, 3600.0))[0]:
                continue
            chunk = os.read(self._fd, 1 << 20)
            if not chunk:  # the child closed the pipe: it wrote all it will
                return b"".join(chunks) or None
            chunks.append(chunk)

    def __enter__(self) -> Beside[T]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _child(fn: Callable[[], object], write_fd: int, parent: int) -> None:
    """The child's whole life: fn(), its value written to the pipe pickled (or that it failed), then os._exit."""
    try:
        # fresh streams to nowhere: a warning or a print must not wait for a lock another thread of the parent held
        sys.stdout = sys.stderr = open(os.devnull, "w")
        warnings.simplefilter("ignore")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        _die_with_parent(parent)
        try:
            out = pickle.dumps(("ok", fn()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # the parent calls fn itself, and raises what it raises
            out = pickle.dumps(("failed", None))
        view = memoryview(out)
        while view:
            view = view[os.write(write_fd, view):]
    finally:
        os._exit(0)


def _die_with_parent(parent: int) -> None:
    """SIGKILL when the parent (its pid read before the fork) ends (prctl PR_SET_PDEATHSIG), so a parent killed by a
    signal leaves no child; a parent that ended before prctl took effect is seen by the child's new parent pid."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):
        return
    if os.getppid() != parent:  # the parent ended before prctl
        os._exit(0)
