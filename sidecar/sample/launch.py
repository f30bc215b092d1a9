"""``record -- COMMAND``: start a program and sample it from its start, as py-spy's ``record --
COMMAND`` and CPython's ``profiling.sampling run`` do. The program runs as sidecar's child with
sidecar's terminal; it is attached to as soon as its interpreter can be read (one that runs
no Python a second after its last exec is said not to be a Python program, and stopped), and,
when the recording ends before it does (``--duration``, Ctrl-C), stopped: SIGTERM, then
SIGKILL. Should sidecar itself die without a word (``kill -9``), the kernel sends the program
SIGTERM (``PR_SET_PDEATHSIG``): no program is left running on its own."""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from sidecar.discover import exe_path, looks_like_python
from sidecar.errors import SidecarError, TargetError, TargetGone, UsageError

T = TypeVar("T")

#: prctl(2)'s option: the signal a process gets when its parent thread ends.
PR_SET_PDEATHSIG = 1


def _ends_with(parent: int) -> Callable[[], None]:
    """What the child runs before it executes the program: SIGTERM to it when ``parent`` (this
    process's launching thread) ends, and an end now if it already has."""

    def arrange() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            return  # not Linux's prctl: the program runs on as it would have
        if os.getppid() != parent:  # the parent died before the prctl took
            os.kill(os.getpid(), signal.SIGTERM)

    return arrange


#: How long a started program may take until its interpreter can be read.
ATTACH_TIMEOUT_S = 10.0
#: How long a started program may run something that is not Python before it is said not to
#: be a Python program: a shell or ``env`` that executes the interpreter takes milliseconds.
NOT_PYTHON_GRACE_S = 1.0
#: How long a program asked to end (SIGTERM) has before it is killed.
STOP_GRACE_S = 5.0


class Launched:
    """A program started for a recording."""

    def __init__(self, command: Sequence[str]) -> None:
        if not command:
            raise UsageError("-- must be followed by a command to run")
        # on one line, as every message is (a `python -c` program has newlines in it)
        self.text = shlex.join(command).replace("\n", "\\n")
        try:
            self.child = subprocess.Popen(list(command), preexec_fn=_ends_with(os.getpid()))
        except OSError as err:
            raise SidecarError(f"cannot start {command[0]}: {err.strerror}") from err

    @property
    def pid(self) -> int:
        return self.child.pid

    def attach(self, attempt: Callable[[], T], timeout: float = ATTACH_TIMEOUT_S) -> T:
        """``attempt`` (an attach) again and again until it works: a program just started has
        no interpreter to read for a moment. Refused once it exits, or after ``timeout``."""
        deadline = time.monotonic() + timeout
        watch = _Watch(self.pid)
        while True:
            try:
                return attempt()
            except TargetError as err:
                code = self.child.poll()
                if code is not None:
                    raise TargetGone(
                        f"{self.text} exited with status {code} before sidecar could attach"
                    ) from err
                if exe := watch.not_python():
                    ended = "stopped" if self._end() else "killed"
                    raise TargetError(
                        f"{self.text} is not a Python program: PID {self.pid} runs {exe}, with "
                        f"no libpython loaded ({ended} it); record samples the program it "
                        "starts, not the programs that one starts"
                    ) from err
                if time.monotonic() > deadline:
                    self.stop()
                    raise TargetError(
                        f"{self.text}: no Python interpreter to read after {timeout:g} s "
                        f"({err}); stopped it"
                    ) from err
                time.sleep(0.02)

    def stop(self) -> str | None:
        """Ends the program if it still runs; what became of it, in words (None: it had
        ended on its own)."""
        ended = self._end()
        if ended is None:
            return None
        if ended:
            return f"stopped {self.text} (PID {self.pid}) as the recording ended"
        return f"killed {self.text} (PID {self.pid}): it did not end on SIGTERM"

    def _end(self) -> bool | None:
        """SIGTERM to the program, SIGKILL if it runs on after ``STOP_GRACE_S``; whether it
        ended on SIGTERM (None: it had ended already)."""
        if self.child.poll() is not None:
            return None
        self.child.terminate()
        try:
            self.child.wait(STOP_GRACE_S)
            return True
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
            return False

    def status(self) -> str:
        """How the program ended, once it has."""
        code = self.child.wait()
        if code < 0:
            return f"{self.text} was ended by {_signal_name(-code)}"
        return f"{self.text} exited with status {code}"

    def exit_status(self) -> int:
        """The program's exit status as a shell gives it, once it has ended: its own, or 128 +
        N for one ended by signal N."""
        code = self.child.wait()
        return 128 - code if code < 0 else code


class _Watch:
    """What a started program runs, and since when: an exec starts its grace anew."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exe = ""
        self.since = time.monotonic()

    def not_python(self) -> str | None:
        """The program's executable once it has run it, not Python (by name or a mapped
        libpython), for ``NOT_PYTHON_GRACE_S``; None until then, or when it cannot be read."""
        exe, now = exe_path(self.pid), time.monotonic()
        if exe != self.exe:
            self.exe, self.since = exe, now
        if not exe or now - self.since < NOT_PYTHON_GRACE_S or looks_like_python(self.pid):
            return None
        return exe


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
