"""A target's CPU limit and its CFS throttling, from the target's own cgroup.

``/proc/PID/cgroup`` names the target's cgroup for the cpu controller: on cgroup v1 the line
whose controllers include ``cpu`` (``4:cpu,cpuacct:/path``), else the v2 line ``0::/path``. The
hierarchy's mount comes from ``/proc/self/mountinfo``; the cgroup's directory is the mount point
plus the path below the mount's root. Where that directory is not there (the sidecar and the
target in different cgroup namespaces, as in a Kubernetes pod sharing its process namespace: the
path is then relative to the sidecar's namespace, ``/../<container>``, or lies outside the
sidecar's mount), the target's own mount is tried, through ``/proc/PID/root``. A directory is
taken only where it is known to be the target's: reached from our own mount's root, or listing
the target in its ``cgroup.procs``; else the reading says it was not found.

- v2: ``cpu.max`` (``max 100000`` or ``QUOTA PERIOD``, microseconds) and ``cpu.stat``
  (``nr_periods``, ``nr_throttled``, ``throttled_usec``).
- v1: ``cpu.cfs_quota_us`` (-1: no limit), ``cpu.cfs_period_us`` and ``cpu.stat``
  (``nr_periods``, ``nr_throttled``, ``throttled_time`` in nanoseconds).

A limit set on an ancestor binds its children, so the limit is the tightest along the path up to
the mount's root, with the throttling counted by the cgroup that sets it. Every file's content is
untrusted: a missing or malformed one raises ``CgroupError`` (``read_cpu``) or gives a
``CpuUnknown`` with the reason (``probe_cpu``), never another exception.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from sidecar.classify.stalls import Stall, Throttled
from sidecar.errors import CgroupError, TargetGone

PROC = Path("/proc")

#: The most of a small cgroup or /proc file read; anything longer is not what the kernel writes.
_LIMIT = 64 * 1024
#: A host's mountinfo can be long (a node with many pods mounts a lot).
_MOUNTINFO_LIMIT = 16 * 1024 * 1024
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Throttling:
    """The CFS bandwidth counters of one cgroup at one instant (cumulative since its creation)."""

    periods: int
    throttled_periods: int
    throttled_seconds: float

    def since(self, earlier: Throttling) -> ThrottledSpan:
        """What happened between ``earlier`` and this reading of the same cgroup."""
        periods = self.periods - earlier.periods
        throttled = self.throttled_periods - earlier.throttled_periods
        lost = self.throttled_seconds - earlier.throttled_seconds
        if periods < 0 or throttled < 0 or lost < 0:
            raise CgroupError("the cgroup's cpu.stat counters went backwards: it was replaced")
        if throttled > periods:
            raise CgroupError(
                f"the cgroup's cpu.stat counted {throttled:,} throttled periods of {periods:,}"
            )
        return ThrottledSpan(periods, throttled, lost)


@dataclass(frozen=True)
class ThrottledSpan:
    """Periods run, periods throttled and CPU seconds lost to throttling over a span."""

    periods: int
    throttled_periods: int
    seconds_lost: float

    @property
    def share(self) -> float:
        """The share of the span's periods that were throttled (0 when no period ran)."""
        return self.throttled_periods / self.periods if self.periods else 0.0


@dataclass(frozen=True)
class CgroupCpu:
    """The CPU limit binding a target, read from its cgroup at monotonic time ``at``.

    ``cores`` is the quota over the period (None: no limit along the path); ``path`` names the
    cgroup as /proc/PID/cgroup does (the one setting the limit, else the target's own);
    ``directory`` is where its files were read; ``whole_path`` is False when the path's upper
    part was not visible (a mount of a sub-tree), so a limit set there cannot be seen."""

    version: int
    path: str
    directory: Path
    cores: float | None
    period_seconds: float
    throttling: Throttling
    at: float
    whole_path: bool = True

    def since(self, earlier: CgroupCpu) -> ThrottledSpan:
        """The throttling between ``earlier`` and this reading, of the same cgroup."""
        if earlier.directory != self.directory:
            raise CgroupError(
                f"the target moved from cgroup {earlier.path} to {self.path} during the span"
            )
        return self.throttling.since(earlier.throttling)


@dataclass(frozen=True)
class CpuUnknown:
    """No cgroup reading for the target, and why."""

    reason: str


def probe_cpu(pid: int, *, proc: Path = PROC) -> CgroupCpu | CpuUnknown:
    """``read_cpu``, with what stops it as a ``CpuUnknown`` carrying the reason."""
    try:
        return read_cpu(pid, proc=proc)
    except CgroupError as err:
        return CpuUnknown(str(err))


def read_cpu(pid: int, *, proc: Path = PROC) -> CgroupCpu:
    """The CPU limit and throttling of process ``pid``'s cgroup (``proc``: where /proc is).

    Raises ``TargetGone`` when the process does not exist, ``CgroupError`` for anything about
    its cgroup that cannot be found or read."""
    own = proc / str(pid)
    try:
        text = _read(own / "cgroup")
    except FileNotFoundError as err:
        raise TargetGone(f"no process {pid}") from err
    except OSError as err:
        raise CgroupError(f"cannot read /proc/{pid}/cgroup: {err.strerror or err}") from err
    version, path = _cpu_line(text, pid)
    for directory, levels in _candidates(version, path, pid, proc):
        return _read_limit(version, path, directory, levels)
    raise CgroupError(
        f"the cgroup v{version} {path} of PID {pid} is not found under this sidecar's "
        "cgroup mounts nor the target's own (/proc/PID/root)"
    )


class ThrottleLog:
    """Readings of one target's cgroup over time (wall clock, as stalls are timed), kept up to
    ``bound`` of them, for the throttling around each stall (``around``). Only readings of a
    cgroup with a limit are kept: without one nothing is throttled."""

    def __init__(self, bound: int = 3600) -> None:
        self.times: deque[float] = deque(maxlen=bound)
        self.readings: deque[CgroupCpu] = deque(maxlen=bound)

    def note(self, reading: CgroupCpu | CpuUnknown | None, when: float | None = None) -> None:
        if not isinstance(reading, CgroupCpu) or reading.cores is None:
            return
        when = time.time() if when is None else when
        if self.times and when <= self.times[-1]:
            return
        self.times.append(when)
        self.readings.append(reading)

    def around(self, start: float, end: float) -> Throttled | None:
        """The throttling from the last reading at or before ``start`` to the first at or
        after ``end``; None where no two readings of one cgroup enclose the span."""
        first = bisect_right(self.times, start) - 1
        last = bisect_left(self.times, end)
        if first < 0 or last >= len(self.times):
            return None
        try:
            span = self.readings[last].since(self.readings[first])
        except CgroupError:
            return None
        lasted = self.times[last] - self.times[first]
        return Throttled(span.periods, span.throttled_periods, span.seconds_lost, lasted)

    def mark(self, stalls: list[Stall]) -> list[Stall]:
        """``stalls``, each with the throttling around it where the readings enclose it."""
        return [replace(s, throttling=self.around(s.start, s.end)) for s in stalls]

    def read(self, pid: int) -> None:
        """Notes the cgroup's counters now: its ``cpu.stat`` alone, where the last reading found
        it (a recording reads four times a second, and a node's mountinfo can be megabytes),
        else the whole cgroup again; a process gone is noted no more. A move to another cgroup
        shows at the next whole reading (``CgroupCpu.since`` then refuses the span)."""
        if self.readings:
            last = self.readings[-1]
            with contextlib.suppress(CgroupError):
                counters = _stat(last.directory, last.version, required=True)
                self.note(replace(last, throttling=counters, at=time.monotonic()))
                return
        with contextlib.suppress(TargetGone):
            self.note(probe_cpu(pid))


def cpu_line(before: CgroupCpu | CpuUnknown, after: CgroupCpu | CpuUnknown) -> str:
    """The one line said beside the shares for a span read ``before`` and ``after``, e.g.
    ``cpu limit 0.20 cores (cgroup v1 /sidecar-test): throttled in 44 of 48 periods (92%),
    2.68 s lost over 3.0 s`` or ``no cpu limit (cgroup v2 /user.slice)``."""
    if isinstance(after, CpuUnknown):
        return f"cpu limit unknown: {after.reason}"
    if isinstance(before, CpuUnknown):
        return f"cpu limit unknown: {before.reason}"
    where = f"cgroup v{after.version} {after.path}"
    if not after.whole_path:
        where += "; the cgroups above it are not visible"
    if after.cores is None:
        return f"no cpu limit ({where})"
    head = f"cpu limit {after.cores:.2f} cores ({where})"
    try:
        span = after.since(before)
    except CgroupError as err:
        return f"{head}: throttling unknown: {err}"
    wall = after.at - before.at
    if span.periods == 0:
        return f"{head}: no period counted over {wall:.1f} s"
    if span.throttled_periods == 0:
        return f"{head}: not throttled in {span.periods} periods over {wall:.1f} s"
    return (
        f"{head}: throttled in {span.throttled_periods} of {span.periods} periods "
        f"({_percent(span.throttled_periods, span.periods)}), "
        f"{span.seconds_lost:.2f} s lost over {wall:.1f} s"
    )


def _percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a whole percentage that says 0% or 100% only when exact."""
    value = round(100 * part / whole)
    if part < whole:
        value = min(value, 99)
    return f"{max(value, 1)}%"


def _read(path: Path, limit: int = _LIMIT) -> str:
    """A small kernel file's text; ``CgroupError`` when it is not text or is too long."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise CgroupError(f"{path} is longer than {limit} bytes: not a kernel file")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as err:
        raise CgroupError(f"{path} is not text") from err


def _cpu_line(text: str, pid: int) -> tuple[int, str]:
    """The version and path of the cpu controller's cgroup in /proc/PID/cgroup's ``text``: the
    v1 line naming ``cpu`` when there is one (the controller is bound to v1), else v2's."""
    v2: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            raise CgroupError(f"/proc/{pid}/cgroup has a malformed line: {line[:80]!r}")
        number, controllers, path = parts
        if path.endswith(" (deleted)"):
            raise CgroupError(f"the cgroup {path.removesuffix(' (deleted)')} was removed")
        if number == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            return 1, path
    if v2 is None:
        raise CgroupError(f"/proc/{pid}/cgroup names no cgroup for the cpu controller")
    return 2, v2


@dataclass(frozen=True)
class _Mount:
    root: str
    point: str


def _mounts(mountinfo: Path, version: int) -> list[_Mount]:
    """The mounts of the cpu controller's hierarchy listed in ``mountinfo`` (none if it cannot
    be read: the caller then says it found nothing)."""
    try:
        text = _read(mountinfo, _MOUNTINFO_LIMIT)
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:] or len(fields) < 10:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 4:
            continue
        kind, options = fields[dash + 1], fields[dash + 3].split(",")
        if (version == 2 and kind == "cgroup2") or (
            version == 1 and kind == "cgroup" and "cpu" in options
        ):
            found.append(_Mount(_unescape(fields[3]), _unescape(fields[4])))
    return found


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m[1], 8)), field)


def _below(path: str, root: str) -> str | None:
    """``path`` relative to a mount's ``root`` ("" at the root), or None when it is not under
    it (a path with ``..`` lies outside the reader's cgroup namespace: never under)."""
    if ".." in path.split("/"):
        return None
    if root == "/":
        return path.strip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :].strip("/")
    return None


def _candidates(version: int, path: str, pid: int, proc: Path) -> Iterator[tuple[Path, int]]:
    """Directories known to be the target's cgroup: (directory, how many levels below its
    mount's root it lies). First through this sidecar's mounts,
    then through the target's own (/proc/PID/root, with its mountinfo)."""
    ours = _mounts(proc / "self" / "mountinfo", version)
    for mount in ours:
        rel = _below(path, mount.root)
        if rel is None:
            continue
        top = Path(mount.point)
        directory = top / rel if rel else top
        if _is_cgroup(directory, version) and _lists(directory, pid) is not False:
            yield directory, len(rel.split("/")) if rel else 0
    theirs = _mounts(proc / str(pid) / "mountinfo", version) or ours
    root = proc / str(pid) / "root"
    for mount in theirs:
        top = root / mount.point.lstrip("/")
        rel = _below(path, mount.root)
        tries = [(top / rel, len(rel.split("/")))] if rel else []
        tries.append((top, 0))  # its namespace's root: its own cgroup, when it lists it
        for directory, levels in tries:
            if _is_cgroup(directory, version) and _lists(directory, pid):
                yield directory, levels


def _is_cgroup(directory: Path, version: int) -> bool:
    name = "cgroup.controllers" if version == 2 else "cpu.cfs_quota_us"
    try:
        return (directory / name).is_file()
    except OSError:
        return False


def _lists(directory: Path, pid: int) -> bool | None:
    """Whether ``directory``'s cgroup.procs lists ``pid`` (None: it cannot be read)."""
    wanted = str(pid)
    try:
        with (directory / "cgroup.procs").open("rb") as handle:
            return any(line.strip().decode("ascii", "replace") == wanted for line in handle)
    except OSError:
        return None


def _read_limit(version: int, path: str, directory: Path, levels: int) -> CgroupCpu:
    """The tightest limit from ``directory`` up ``levels`` levels to its mount's root."""
    own: tuple[float | None, float] | None = None
    best: tuple[float, float, Path, str] | None = None
    here, name = directory, path
    for _ in range(levels + 1):
        cores, period = _limit_v1(here) if version == 1 else _limit_v2(here)
        if own is None:
            own = (cores, period)
        if cores is not None and (best is None or cores < best[0]):
            best = (cores, period, here, name)
        here, name = here.parent, posixpath.dirname(name.rstrip("/")) or "/"
    whole = _whole(path, levels)
    if best is None:
        assert own is not None
        at = time.monotonic()
        stat = _stat(directory, version, required=False)
        return CgroupCpu(version, path, directory, None, own[1], stat, at, whole)
    cores, period, limiting, name = best
    at = time.monotonic()
    stat = _stat(limiting, version, required=True)
    return CgroupCpu(version, name, limiting, cores, period, stat, at, whole)


def _whole(path: str, levels: int) -> bool:
    """Whether the walk up reached the hierarchy's own root, not a mount of a sub-tree."""
    return levels == len([part for part in path.split("/") if part]) and ".." not in path


def _number(directory: Path, name: str) -> int:
    file = directory / name
    try:
        text = _read(file).strip()
    except OSError as err:
        raise CgroupError(f"cannot read {file}: {err.strerror or err}") from err
    if not re.fullmatch(r"-?[0-9]{1,19}", text):
        raise CgroupError(f"{file} reads {text[:40]!r}: not a number")
    return int(text)


def _limit_v1(directory: Path) -> tuple[float | None, float]:
    quota = _number(directory, "cpu.cfs_quota_us")
    period = _number(directory, "cpu.cfs_period_us")
    if period <= 0:
        raise CgroupError(f"{directory / 'cpu.cfs_period_us'} reads {period}: not a period")
    if quota == -1:
        return None, period / 1e6
    if quota <= 0:
        raise CgroupError(f"{directory / 'cpu.cfs_quota_us'} reads {quota}: not a quota")
    return quota / period, period / 1e6


def _limit_v2(directory: Path) -> tuple[float | None, float]:
    """``cpu.max``; a cgroup without one (the root, or the cpu controller not enabled for it)
    sets no limit."""
    file = directory / "cpu.max"
    try:
        text = _read(file).strip()
    except FileNotFoundError:
        return None, 0.1
    except OSError as err:
        raise CgroupError(f"cannot read {file}: {err.strerror or err}") from err
    match = re.fullmatch(r"(max|[0-9]{1,19}) ([0-9]{1,19})", text)
    if match is None or int(match[2]) == 0 or match[1] == "0":
        raise CgroupError(f"{file} reads {text[:40]!r}: not 'max PERIOD' or 'QUOTA PERIOD'")
    period = int(match[2])
    if match[1] == "max":
        return None, period / 1e6
    return int(match[1]) / period, period / 1e6


_STAT_KEYS = {
    1: ("nr_periods", "nr_throttled", "throttled_time", 1e9),
    2: ("nr_periods", "nr_throttled", "throttled_usec", 1e6),
}


def _stat(directory: Path, version: int, *, required: bool) -> Throttling:
    """The throttling counters of ``directory``'s cpu.stat. Without them (a v2 cgroup whose cpu
    controller is off, allowed only where no limit binds) nothing was throttled: zeros."""
    file = directory / "cpu.stat"
    try:
        text = _read(file)
    except OSError as err:
        raise CgroupError(f"cannot read {file}: {err.strerror or err}") from err
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_.]{1,64}) ([0-9]{1,20})", line)
        if match is None:
            raise CgroupError(f"{file} has a malformed line: {line[:80]!r}")
        values[match[1]] = int(match[2])
    periods, throttled, lost, unit = _STAT_KEYS[version]
    missing = [key for key in (periods, throttled, lost) if key not in values]
    if missing and (required or len(missing) < 3 or version == 1):
        raise CgroupError(f"{file} has no {', '.join(missing)}")
    if missing:
        return Throttling(0, 0, 0.0)
    if values[throttled] > values[periods]:
        raise CgroupError(
            f"{file} counts {values[throttled]} throttled periods of {values[periods]}"
        )
    return Throttling(values[periods], values[throttled], values[lost] / unit)
