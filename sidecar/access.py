"""What the kernel lets this sidecar read: whether it can trace other processes (detected at
start and explained in one line), and why a read of one target was refused (the capabilities
the target holds and sidecar lacks, named).

Reading another process's memory needs ptrace access: CAP_SYS_PTRACE, or (without it) the same
UID as the target, a target that is dumpable, and a kernel Yama ``ptrace_scope`` of 0 (scope 1
allows only descendants, 2 only CAP_SYS_PTRACE, 3 nothing).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CAP_SYS_PTRACE = 19
YAMA = "/proc/sys/kernel/yama/ptrace_scope"


#: How a pod grants its sidecar CAP_SYS_PTRACE and the app's processes.
IN_KUBERNETES = (
    "in Kubernetes add SYS_PTRACE to the sidecar container's securityContext.capabilities and "
    "set shareProcessNamespace: true on the pod"
)


def _field(status: str, name: str) -> str:
    """A field of a ``/proc/PID/status`` text ("" when it has none)."""
    for line in status.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def _own_status() -> str:
    with open("/proc/self/status") as handle:
        return handle.read()


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


def detect(own_status: str | None = None) -> Tracing:
    """What this process may trace, from its ``/proc/self/status`` (read now unless given)."""
    own = _own_status() if own_status is None else own_status
    effective = int(_field(own, "CapEff") or "0", 16)
    try:
        with open(YAMA) as handle:
            scope: int | None = int(handle.read().strip())
    except (OSError, ValueError):
        scope = None
    return Tracing(bool(effective >> CAP_SYS_PTRACE & 1), os.geteuid(), scope)


#: Linux capabilities by number (capability.h), as ``/proc/PID/status`` masks them.
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip


def capability_names(mask: int) -> list[str]:
    """``CAP_NAME`` of each capability in ``mask`` (``CAP_N`` for one newer than the table)."""
    return [
        f"CAP_{CAPABILITIES[bit]}" if bit < len(CAPABILITIES) else f"CAP_{bit}"
        for bit in range(mask.bit_length())
        if mask >> bit & 1
    ]


def missing_capabilities(target_status: str, own_status: str) -> int:
    """The capabilities a target holds (permitted) and this process does not, as a mask, from
    the two ``/proc/PID/status`` texts."""
    held, own = (int(_field(s, "CapPrm") or "0", 16) for s in (target_status, own_status))
    return held & ~own


def why_denied(pid: int) -> str | None:
    """Why the kernel will not let this process read ``pid``, when its own state says: Yama
    forbids all tracing; another user's process and no CAP_SYS_PTRACE; or the target holds
    capabilities this process lacks (a reader must hold all of its target's, unless it holds
    CAP_SYS_PTRACE over the target's user namespace: root in a container without some of the
    host's reading the host's init). None when none of these tells."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            target = handle.read()
        own = _own_status()
    except OSError:
        return None
    return explain_denied(target, own, detect(own), os.geteuid())


def explain_denied(target: str, own: str, tracing: Tracing, euid: int) -> str | None:
    """``why_denied`` from what it read: the target's and this process's ``/proc/PID/status``,
    what this process may trace, and its effective UID."""
    if tracing.yama_scope == 3:
        return "Yama ptrace_scope 3 forbids all tracing on this machine"
    # "Uid:" holds the real, effective, saved and file system ids, in decimal
    real = int((_field(target, "Uid").split() or ["-1"])[0])
    if not tracing.capability and real != euid:
        return (
            f"it runs as UID {real} and this sidecar as UID {euid} without CAP_SYS_PTRACE: "
            f"run sidecar as root or grant it CAP_SYS_PTRACE; {IN_KUBERNETES}"
        )
    missing = missing_capabilities(target, own)
    if missing and not tracing.capability:
        return (
            f"it holds {len(capability_names(missing))} capabilities this sidecar lacks, and "
            f"the kernel refuses such a reader unless it holds CAP_SYS_PTRACE: grant sidecar "
            f"CAP_SYS_PTRACE; {IN_KUBERNETES}"
        )
    if missing:
        names = ", ".join(capability_names(missing))
        return (
            f"it holds capabilities this sidecar lacks ({names}), and the kernel refuses a "
            "reader that lacks any of its target's capabilities unless it holds CAP_SYS_PTRACE "
            "over the target's user namespace: grant the sidecar those capabilities too"
        )
    return None
