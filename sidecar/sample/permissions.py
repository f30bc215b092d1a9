"""Can this sidecar trace other processes? Detected at start and explained in one line.

Reading another process's memory needs ptrace access: CAP_SYS_PTRACE, or (without it) the same
UID as the target, a target that is dumpable, and a kernel Yama ``ptrace_scope`` of 0 (scope 1
allows only descendants, 2 only CAP_SYS_PTRACE, 3 nothing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CAP_SYS_PTRACE = 19
YAMA = "/proc/sys/kernel/yama/ptrace_scope"


def _status_field(name: str) -> str:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


@dataclass(frozen=True)
class Tracing:
    """What the kernel will let this process trace."""

    capability: bool
    uid: int
    yama_scope: int | None

    @property
    def ok(self) -> bool:
        """Likely able to trace the pod's processes (others are checked per target)."""
        return self.capability or self.yama_scope in (None, 0)

    def explain(self) -> str:
        if self.capability:
            if self.yama_scope == 3:
                return "tracing: CAP_SYS_PTRACE, but Yama ptrace_scope 3 forbids all tracing"
            return (
                "tracing: CAP_SYS_PTRACE present; any process in this PID namespace can be sampled"
            )
        base = f"tracing: no CAP_SYS_PTRACE; only processes of UID {self.uid} that are dumpable"
        if self.yama_scope is None:
            return base + " can be sampled (Yama not active)"
        if self.yama_scope == 0:
            return base + " can be sampled (Yama ptrace_scope 0)"
        return (
            base.replace("only processes", "processes")
            + f" could be sampled, but Yama ptrace_scope {self.yama_scope} forbids it: add "
            "SYS_PTRACE to the container, or set kernel.yama.ptrace_scope=0 on the node"
        )


def detect() -> Tracing:
    effective = int(_status_field("CapEff") or "0", 16)
    try:
        with open(YAMA) as handle:
            scope: int | None = int(handle.read().strip())
    except (OSError, ValueError):
        scope = None
    return Tracing(bool(effective >> CAP_SYS_PTRACE & 1), os.geteuid(), scope)
