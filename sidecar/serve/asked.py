"""The processes ``serve --pid`` asks for: each must exist and run Python when serve starts (a
PID that does not is a mistake of the command line, refused in one line), and one that is not
sampled later (it exited) is said in the log at WARNING, once, and in ``/healthz``, which it
makes ``degraded``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sidecar.discover import exe_name, looks_like_python, read_cmdline
from sidecar.errors import TargetError, TargetGone

log = logging.getLogger("sidecar.serve")


def check_at_start(pids: Iterable[int]) -> None:
    """Refuses a PID asked for that names no process, or one that is not Python (serve would
    never sample it): one line, exit 1, as ``record --pid`` refuses it."""
    for pid in sorted(set(pids)):
        if not read_cmdline(pid):  # none, or a zombie: nothing to sample
            raise TargetGone(f"--pid {pid}: no process with PID {pid}")
        if not looks_like_python(pid):
            raise TargetError(
                f"--pid {pid}: PID {pid} does not look like a Python process (it runs "
                f"{exe_name(pid) or 'a program sidecar cannot name'})"
            )


@dataclass(frozen=True)
class Missing:
    """A PID asked for that is not sampled, why, and since when (unix seconds)."""

    pid: int
    reason: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "reason": self.reason, "since": round(self.since, 1)}


class Asked:
    """The PIDs asked for, checked after every scan against those sampled or tried."""

    def __init__(self, pids: Iterable[int], clock: Callable[[], float] = time.time) -> None:
        self.pids = frozenset(pids)
        self.clock = clock
        #: replaced whole by ``check``: ``/healthz`` reads it from another thread
        self.missing: tuple[Missing, ...] = ()
        #: the PIDs seen sampled or tried: one of them gone has exited
        self._known: set[int] = set()

    def check(self, sampled: Iterable[int], tried: Iterable[int]) -> None:
        """After a scan: ``sampled`` the PIDs with a session, ``tried`` those with a problem
        (``/healthz`` lists them already)."""
        sampled, tried = set(sampled), set(tried)
        self._known |= (sampled | tried) & self.pids
        before = {m.pid: m for m in self.missing}
        missing = []
        for pid in sorted(self.pids - sampled - tried):
            reason = self._why(pid)
            kept = before.get(pid)
            if kept is not None and kept.reason == reason:
                missing.append(kept)
                continue
            missing.append(Missing(pid, reason, self.clock()))
            log.warning("PID %d, asked for with --pid, is not sampled: %s", pid, reason)
        self.missing = tuple(missing)

    def _why(self, pid: int) -> str:
        # the program's name only, never its arguments: /healthz answers without the token
        if not read_cmdline(pid):
            return "it exited" if pid in self._known else "no process with this PID"
        if not looks_like_python(pid):
            return f"it runs {exe_name(pid) or 'a program sidecar cannot name'}, not Python"
        return "not found by the last scan"

    def health(self) -> list[dict[str, Any]]:
        return [m.to_json() for m in self.missing]
