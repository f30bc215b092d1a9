"""What became of a target while it was sampled, as its /proc tells it: stopped (SIGSTOP, a
debugger's stop) and for how long, or running another program (it executed one), for the
lines ``record`` and ``stats`` say beside the shares, in place of advice that does not fit
(a stopped target's threads read idle; one that became another program reads no sample).

A stopped target cannot be paused for each read either: ``--blocking`` refuses it up front
(``refuse_stopped``) rather than failing in the middle of a read.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from sidecar.discover import exe_path, read_cmdline, read_proc_or_empty
from sidecar.errors import TargetError


def state_of(pid: int) -> str:
    """The process's state letter (R, S, D, T, t, Z...), empty when unreadable: the field after
    the command's closing parenthesis in /proc/PID/stat."""
    stat = read_proc_or_empty(pid, "stat")
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    return fields[0] if paren and fields else ""


def is_stopped(pid: int) -> bool:
    """Stopped by a signal (T) or at a tracer's stop (t)."""
    return state_of(pid) in ("T", "t")


def refuse_stopped(pid: int) -> None:
    """``--blocking`` on a stopped target: one line, before any attach."""
    if is_stopped(pid):
        raise TargetError(
            f"PID {pid} is stopped (SIGSTOP or a debugger): --blocking cannot pause it for its "
            f"reads; resume it (kill -CONT {pid}) or leave out --blocking"
        )


@contextlib.contextmanager
def said_if_stopped(pid: int) -> Iterator[None]:
    """A failed attach to a stopped target says it is stopped, not what the failure looked
    like (a stopped interpreter that never ran far enough reads as no Python at all)."""
    try:
        yield
    except TargetError as err:
        if not is_stopped(pid):
            raise
        raise TargetError(
            f"PID {pid} is stopped (SIGSTOP or a debugger) and cannot be read as it is ({err}); "
            f"resume it (kill -CONT {pid})"
        ) from err


@dataclass
class Fate:
    """A target watched at each poll of a recording."""

    pid: int
    #: the program it ran when the watch began
    exe: str
    #: seconds it was seen stopped, to the poll interval
    stopped_s: float = 0.0
    #: its command line once it runs another program, None while it runs the same
    became: str | None = None
    _last: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, pid: int) -> Fate:
        return cls(pid, exe_path(pid))

    def poll(self) -> None:
        now = time.monotonic()
        if self.became is None and is_stopped(self.pid):
            self.stopped_s += now - self._last
        self._last = now
        if self.became is None and os.path.exists(f"/proc/{self.pid}"):
            exe = exe_path(self.pid)
            if exe and self.exe and exe != self.exe:
                self.became = read_cmdline(self.pid) or exe

    def lines(self, elapsed: float) -> list[str]:
        """What to say of it, if anything, beside the shares of ``elapsed`` seconds."""
        out = []
        if self.stopped_s >= 0.25:
            out.append(
                f"PID {self.pid} was stopped (SIGSTOP or a debugger) for about "
                f"{self.stopped_s:.1f} of {elapsed:.1f} s: its threads did not run, so its "
                f"samples then read idle; kill -CONT {self.pid} resumes it"
            )
        if self.became is not None:
            out.append(
                f"PID {self.pid} became another program during the recording "
                f"({self.became[:80]}): no Python to read after that, so its ticks then read "
                "no sample"
            )
        return out
