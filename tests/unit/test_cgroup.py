"""The cgroup reader on real files: directory trees shaped as this machine's cgroup v1 cpu
hierarchy (``/sys/fs/cgroup/cpu``) and its v2 one (``/sys/fs/cgroup/unified``), with the files
the kernel writes there and the contents it writes, and a /proc holding ``self/mountinfo``,
``PID/cgroup``, ``PID/mountinfo`` and ``PID/root``. The cpu controller is bound to v1 on this
machine, so a v2 cgroup's ``cpu.max`` and throttling lines follow the kernel's documented format
(Documentation/admin-guide/cgroup-v2.rst) beside the files a real v2 child has here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sidecar.errors import CgroupError, TargetGone
from sidecar.sample.cgroup import (
    CgroupCpu,
    CpuUnknown,
    Throttling,
    cpu_line,
    probe_cpu,
    read_cpu,
)

PID = 4242

#: The files of a v1 cpu cgroup on this machine (``ls /sys/fs/cgroup/cpu/<child>``).
V1_FILES = (
    "cgroup.clone_children",
    "cgroup.procs",
    "cpu.cfs_burst_us",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "cpu.idle",
    "cpu.rt_period_us",
    "cpu.rt_runtime_us",
    "cpu.shares",
    "cpu.stat",
    "cpu.stat.local",
    "notify_on_release",
    "tasks",
)
#: The files of a v2 child here (``ls /sys/fs/cgroup/unified/<child>``), plus cpu.max, which a
#: cgroup has once its parent enables the cpu controller for it.
V2_FILES = (
    "cgroup.controllers",
    "cgroup.events",
    "cgroup.freeze",
    "cgroup.kill",
    "cgroup.max.depth",
    "cgroup.max.descendants",
    "cgroup.pressure",
    "cgroup.procs",
    "cgroup.stat",
    "cgroup.subtree_control",
    "cgroup.threads",
    "cgroup.type",
    "cpu.max",
    "cpu.pressure",
    "cpu.stat",
    "io.pressure",
    "memory.pressure",
)

#: /proc/self/mountinfo of this machine, with the cgroup mounts' points under {top}.
MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
31 23 0:28 / {top} rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 {v1root} {top}/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {top}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / {top}/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / {top}/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / {top}/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 {v2root} {top}/unified rw,relatime - cgroup2 cgroup2 rw
"""

#: /proc/PID/cgroup of a process here, its cpu cgroup ({v1}) and its v2 one ({v2}) filled in.
PROC_CGROUP = """\
9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/459d6fff5e1177ebf541949fa0efc5f1
3:cpuset:/
2:cpuacct:/
1:cpu:{v1}
0::{v2}
"""

#: A pure v2 machine's /proc/PID/cgroup: one line.
PROC_CGROUP_V2 = "0::{v2}\n"


def v1_stat(periods: int, throttled: int, ns: int) -> str:
    return (
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {ns}\n"
        "nr_bursts 0\nburst_time 0\n"
    )


def v2_stat(periods: int, throttled: int, us: int) -> str:
    return (
        "usage_usec 3068508929\nuser_usec 2585551804\nsystem_usec 482957125\nnice_usec 0\n"
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {us}\n"
        "nr_bursts 0\nburst_usec 0\n"
    )


#: The v2 root's cpu.stat here: no cpu controller, so no throttling lines (and no cpu.max).
V2_ROOT_STAT = "usage_usec 3068508929\nuser_usec 2585551804\nsystem_usec 482957125\nnice_usec 0\n"


class Machine:
    """A /proc and a /sys/fs/cgroup under a tmp dir, built file by file."""

    def __init__(self, tmp: Path, *, v1root: str = "/", v2root: str = "/") -> None:
        self.proc = tmp / "proc"
        self.top = tmp / "sys" / "fs" / "cgroup"
        self.write(
            self.proc / "self" / "mountinfo",
            MOUNTINFO.format(top=self.top, v1root=v1root, v2root=v2root),
        )

    def write(self, path: Path, text: str | bytes) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        return path

    def target(self, cgroup: str) -> None:
        """The target's /proc/PID/cgroup; the cgroups it names list it in their cgroup.procs
        when built after this (as the kernel does)."""
        self.write(self.proc / str(PID) / "cgroup", cgroup)
        self.paths = {line.split(":", 2)[2].strip("/") for line in cgroup.splitlines()}

    def procs(self, base: Path, rel: str, procs: str | None) -> str:
        if procs is not None:
            return procs
        mine = base.parent == self.top and rel.strip("/") in getattr(self, "paths", ())
        return f"1\n{PID}\n" if mine else "1\n"

    def v1(
        self,
        base: Path,
        rel: str,
        quota: int = -1,
        stat: str = v1_stat(0, 0, 0),
        *,
        procs: str | None = None,
    ) -> Path:
        directory = base / rel.strip("/") if rel.strip("/") else base
        for name in V1_FILES:
            self.write(directory / name, "")
        self.write(directory / "cpu.cfs_quota_us", f"{quota}\n")
        self.write(directory / "cpu.cfs_period_us", "100000\n")
        self.write(directory / "cpu.cfs_burst_us", "0\n")
        self.write(directory / "cpu.stat", stat)
        self.write(directory / "cgroup.procs", self.procs(base, rel, procs))
        return directory

    def v2(
        self, base: Path, rel: str, cpu_max: str | None, stat: str, *, procs: str | None = None
    ) -> Path:
        directory = base / rel.strip("/") if rel.strip("/") else base
        for name in V2_FILES:
            self.write(directory / name, "")
        self.write(directory / "cgroup.controllers", "cpu\n" if cpu_max else "hugetlb\n")
        if cpu_max is None:
            (directory / "cpu.max").unlink()
        else:
            self.write(directory / "cpu.max", cpu_max)
        self.write(directory / "cpu.stat", stat)
        self.write(directory / "cgroup.procs", self.procs(base, rel, procs))
        return directory


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def limited_v1(machine: Machine) -> Path:
    machine.target(PROC_CGROUP.format(v1="/sidecar-test", v2="/"))
    machine.v1(machine.top / "cpu", "/")
    return machine.v1(machine.top / "cpu", "/sidecar-test", 20000, v1_stat(10, 2, 150_000_000))


def test_v1_limit_and_throttling(machine: Machine) -> None:
    directory = limited_v1(machine)
    before = read_cpu(PID, proc=machine.proc)
    assert before.version == 1
    assert before.path == "/sidecar-test"
    assert before.directory == directory
    assert before.cores == pytest.approx(0.2)
    assert before.period_seconds == pytest.approx(0.1)
    assert before.throttling == Throttling(10, 2, 0.15)
    assert before.whole_path
    machine.write(directory / "cpu.stat", v1_stat(58, 46, 2_830_000_000))
    after = dataclasses.replace(read_cpu(PID, proc=machine.proc), at=before.at + 3.0)
    span = after.since(before)
    assert (span.periods, span.throttled_periods) == (48, 44)
    assert span.seconds_lost == pytest.approx(2.68)
    assert span.share == pytest.approx(44 / 48)
    assert cpu_line(before, after) == (
        "cpu limit 0.20 cores (cgroup v1 /sidecar-test): throttled in 44 of 48 periods (92%), "
        "2.68 s lost over 3.0 s"
    )


def test_v1_unlimited_root(machine: Machine) -> None:
    machine.target(PROC_CGROUP.format(v1="/", v2="/"))
    machine.v1(machine.top / "cpu", "/")
    reading = read_cpu(PID, proc=machine.proc)
    assert reading.cores is None
    assert reading.throttling == Throttling(0, 0, 0.0)
    assert cpu_line(reading, reading) == "no cpu limit (cgroup v1 /)"


def test_the_tightest_limit_along_the_path_binds(machine: Machine) -> None:
    """Kubernetes limits the pod's cgroup and the container's: the tighter one binds, and its
    own cpu.stat counts the throttling."""
    machine.target(PROC_CGROUP.format(v1="/kubepods/pod1/ctr", v2="/"))
    cpu = machine.top / "cpu"
    machine.v1(cpu, "/")
    machine.v1(cpu, "/kubepods")
    machine.v1(cpu, "/kubepods/pod1", 50000, v1_stat(30, 7, 400_000_000))
    machine.v1(cpu, "/kubepods/pod1/ctr")
    reading = read_cpu(PID, proc=machine.proc)
    assert reading.cores == pytest.approx(0.5)
    assert reading.path == "/kubepods/pod1"
    assert reading.throttling == Throttling(30, 7, 0.4)
    machine.v1(cpu, "/kubepods/pod1/ctr", 30000, v1_stat(5, 1, 1000))
    assert read_cpu(PID, proc=machine.proc).path == "/kubepods/pod1/ctr"


def test_v2_limit(machine: Machine) -> None:
    machine.write(
        machine.proc / "self" / "mountinfo",
        MOUNTINFO.format(top=machine.top, v1root="/", v2root="/"),
    )
    machine.target(PROC_CGROUP_V2.format(v2="/system.slice/web.service"))
    unified = machine.top / "unified"
    machine.v2(unified, "/", None, V2_ROOT_STAT)
    machine.v2(unified, "/system.slice", "max 100000\n", v2_stat(0, 0, 0))
    directory = machine.v2(
        unified, "/system.slice/web.service", "150000 100000\n", v2_stat(200, 20, 1_500_000)
    )
    before = read_cpu(PID, proc=machine.proc)
    assert (before.version, before.path, before.directory) == (
        2,
        "/system.slice/web.service",
        directory,
    )
    assert before.cores == pytest.approx(1.5)
    assert before.throttling == Throttling(200, 20, 1.5)
    machine.write(directory / "cpu.stat", v2_stat(220, 21, 1_510_000))
    after = dataclasses.replace(read_cpu(PID, proc=machine.proc), at=before.at + 2.0)
    assert cpu_line(before, after) == (
        "cpu limit 1.50 cores (cgroup v2 /system.slice/web.service): throttled in 1 of 20 "
        "periods (5%), 0.01 s lost over 2.0 s"
    )


def test_v2_max_reads_no_limit(machine: Machine) -> None:
    path = "/user.slice/user-0.slice/session-1.scope"
    machine.target(PROC_CGROUP_V2.format(v2=path))
    unified = machine.top / "unified"
    machine.v2(unified, "/", None, V2_ROOT_STAT)
    machine.v2(unified, "/user.slice", "max 100000\n", v2_stat(0, 0, 0))
    machine.v2(unified, "/user.slice/user-0.slice", "max 100000\n", v2_stat(0, 0, 0))
    machine.v2(unified, path, "max 100000\n", v2_stat(3, 0, 0))
    reading = read_cpu(PID, proc=machine.proc)
    assert reading.cores is None
    assert reading.throttling == Throttling(3, 0, 0.0)
    assert cpu_line(reading, reading) == f"no cpu limit (cgroup v2 {path})"


def test_v2_root_without_the_cpu_controller(machine: Machine) -> None:
    """This machine's own v2 root: no cpu.max, a cpu.stat of usage only; nothing throttles."""
    machine.target(PROC_CGROUP_V2.format(v2="/"))
    machine.v2(machine.top / "unified", "/", None, V2_ROOT_STAT)
    reading = read_cpu(PID, proc=machine.proc)
    assert (reading.cores, reading.throttling) == (None, Throttling(0, 0, 0.0))


def test_v1_wins_where_the_cpu_controller_is_bound_to_v1(machine: Machine) -> None:
    machine.target(PROC_CGROUP.format(v1="/sidecar-test", v2="/"))
    machine.v1(machine.top / "cpu", "/")
    machine.v1(machine.top / "cpu", "/sidecar-test", 20000)
    machine.v2(machine.top / "unified", "/", None, V2_ROOT_STAT)
    assert read_cpu(PID, proc=machine.proc).version == 1


def test_cpuacct_and_cpuset_are_not_cpu(machine: Machine) -> None:
    machine.target("3:cpuset:/a\n2:cpuacct:/b\n")
    with pytest.raises(CgroupError, match="names no cgroup for the cpu controller"):
        read_cpu(PID, proc=machine.proc)


def test_another_cgroup_namespace_through_the_targets_root(machine: Machine) -> None:
    """In a pod with a shared process namespace, the target's cgroup is relative to the
    sidecar's namespace root (``/../<container>``); the target's own mount shows it at its
    root, and its cgroup.procs lists it."""
    machine.target("0::/../cri-containerd-abc.scope\n")
    machine.v2(machine.top / "unified", "/", None, V2_ROOT_STAT, procs="1\n7\n")
    theirs = machine.proc / str(PID) / "root" / "sys" / "fs" / "cgroup"
    machine.write(
        machine.proc / str(PID) / "mountinfo",
        "1200 1100 0:38 /../cri-containerd-abc.scope /sys/fs/cgroup ro,nosuid - cgroup2 "
        "cgroup rw\n",
    )
    machine.v2(theirs, "/", "50000 100000\n", v2_stat(9, 3, 120_000), procs=f"1\n{PID}\n")
    reading = read_cpu(PID, proc=machine.proc)
    assert reading.directory == theirs
    assert reading.cores == pytest.approx(0.5)
    assert not reading.whole_path
    assert cpu_line(reading, reading) == (
        "cpu limit 0.50 cores (cgroup v2 /../cri-containerd-abc.scope; the cgroups above it are "
        "not visible): no period counted over 0.0 s"
    )


def test_a_path_outside_the_sidecars_mount(tmp_path: Path) -> None:
    """v1 without cgroup namespaces: the sidecar's mount is its own container's sub-tree, the
    target's full path lies outside it; the target's own mount (its root field names the path)
    has it, and lists it."""
    machine = Machine(tmp_path, v1root="/kubepods/pod1/sidecar")
    machine.target(PROC_CGROUP.format(v1="/kubepods/pod1/app", v2="/"))
    machine.v1(machine.top / "cpu", "/", procs="1\n")
    machine.write(
        machine.proc / str(PID) / "mountinfo",
        "900 800 0:29 /kubepods/pod1/app /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,"
        "cpuacct\n",
    )
    theirs = machine.proc / str(PID) / "root" / "sys" / "fs" / "cgroup" / "cpu,cpuacct"
    machine.v1(theirs, "/", 20000, v1_stat(1, 1, 5), procs=f"{PID}\n")
    reading = read_cpu(PID, proc=machine.proc)
    assert (reading.directory, reading.cores, reading.whole_path) == (theirs, 0.2, False)


def test_not_found_says_so_rather_than_guess(machine: Machine) -> None:
    """The target's root holds a cgroup that does not list the target: not taken for its."""
    machine.target("0::/../other.scope\n")
    machine.v2(machine.top / "unified", "/", None, V2_ROOT_STAT, procs="1\n")
    machine.write(
        machine.proc / str(PID) / "mountinfo",
        "1200 1100 0:38 /../other.scope /sys/fs/cgroup ro - cgroup2 cgroup rw\n",
    )
    theirs = machine.proc / str(PID) / "root" / "sys" / "fs" / "cgroup"
    machine.v2(theirs, "/", "50000 100000\n", v2_stat(0, 0, 0), procs="1\n")
    with pytest.raises(CgroupError, match=r"cgroup v2 /\.\./other\.scope of PID 4242 is not found"):
        read_cpu(PID, proc=machine.proc)
    unknown = probe_cpu(PID, proc=machine.proc)
    assert isinstance(unknown, CpuUnknown)
    assert cpu_line(unknown, unknown) == f"cpu limit unknown: {unknown.reason}"


def test_a_path_missing_under_the_mount(machine: Machine) -> None:
    machine.target(PROC_CGROUP.format(v1="/gone", v2="/"))
    machine.v1(machine.top / "cpu", "/")
    with pytest.raises(CgroupError, match="not found"):
        read_cpu(PID, proc=machine.proc)


def test_no_mountinfo(machine: Machine) -> None:
    limited_v1(machine)
    (machine.proc / "self" / "mountinfo").unlink()
    with pytest.raises(CgroupError, match="not found"):
        read_cpu(PID, proc=machine.proc)


def test_escaped_mount_point(tmp_path: Path) -> None:
    machine = Machine(tmp_path / "with space")
    text = (machine.proc / "self" / "mountinfo").read_text()
    machine.write(machine.proc / "self" / "mountinfo", text.replace("with space", r"with\040space"))
    directory = limited_v1(machine)
    assert read_cpu(PID, proc=machine.proc).directory == directory


def test_target_gone(machine: Machine) -> None:
    with pytest.raises(TargetGone):
        read_cpu(PID, proc=machine.proc)


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("cpu.cfs_quota_us", "twenty\n", r"cpu.cfs_quota_us reads 'twenty': not a number"),
        ("cpu.cfs_quota_us", "", r"cpu.cfs_quota_us reads '': not a number"),
        ("cpu.cfs_quota_us", "-5\n", r"cpu.cfs_quota_us reads -5: not a quota"),
        ("cpu.cfs_quota_us", "1" * 40, r"not a number"),
        ("cpu.cfs_period_us", "0\n", r"cpu.cfs_period_us reads 0: not a period"),
        ("cpu.cfs_period_us", None, r"cannot read .*cpu.cfs_period_us"),
        ("cpu.stat", "nr_periods ten\n", r"cpu.stat has a malformed line: 'nr_periods ten'"),
        ("cpu.stat", "nr_periods 5\nnr_throttled 1\n", r"cpu.stat has no throttled_time"),
        ("cpu.stat", v1_stat(3, 4, 0), r"counts 4 throttled periods of 3"),
        ("cpu.stat", None, r"cannot read .*cpu.stat"),
        ("cpu.stat", b"nr_periods \xff\n", r"cpu.stat is not text"),
        ("cpu.stat", "x 1\n" * 20000, r"cpu.stat is longer than 65536 bytes"),
    ],
)
def test_malformed_v1_files(
    machine: Machine, name: str, content: str | bytes | None, said: str
) -> None:
    directory = limited_v1(machine)
    if content is None:
        (directory / name).unlink()
    else:
        machine.write(directory / name, content)
    with pytest.raises(CgroupError, match=said):
        read_cpu(PID, proc=machine.proc)
    unknown = probe_cpu(PID, proc=machine.proc)
    assert isinstance(unknown, CpuUnknown)
    assert unknown.reason


@pytest.mark.parametrize(
    ("cpu_max", "stat", "said"),
    [
        ("20000\n", v2_stat(0, 0, 0), r"cpu.max reads '20000': not 'max PERIOD' or 'QUOTA PERIOD'"),
        ("max\n", v2_stat(0, 0, 0), r"cpu.max reads 'max'"),
        ("0 100000\n", v2_stat(0, 0, 0), r"cpu.max reads '0 100000'"),
        ("20000 0\n", v2_stat(0, 0, 0), r"cpu.max reads '20000 0'"),
        ("20000 100000 7\n", v2_stat(0, 0, 0), r"cpu.max reads '20000 100000 7'"),
        (
            "20000 100000\n",
            V2_ROOT_STAT,
            r"cpu.stat has no nr_periods, nr_throttled, throttled_usec",
        ),
        ("max 100000\n", "usage_usec 1\nnr_periods 1\n", r"cpu.stat has no nr_throttled"),
    ],
)
def test_malformed_v2_files(machine: Machine, cpu_max: str, stat: str, said: str) -> None:
    machine.target(PROC_CGROUP_V2.format(v2="/web"))
    machine.v2(machine.top / "unified", "/", None, V2_ROOT_STAT)
    machine.v2(machine.top / "unified", "/web", cpu_max, stat)
    with pytest.raises(CgroupError, match=said):
        read_cpu(PID, proc=machine.proc)
    assert isinstance(probe_cpu(PID, proc=machine.proc), CpuUnknown)


@pytest.mark.parametrize(
    ("cgroup", "said"),
    [
        ("garbage\n", r"/proc/4242/cgroup has a malformed line: 'garbage'"),
        ("x:cpu:/a\n", r"malformed line"),
        ("1:cpu:relative\n", r"malformed line"),
        ("", r"names no cgroup for the cpu controller"),
        ("1:cpu:/sidecar-test (deleted)\n", r"the cgroup /sidecar-test was removed"),
        (b"1:cpu:/\xfe\n", r"/proc/4242/cgroup is not text"),
    ],
)
def test_malformed_proc_cgroup(machine: Machine, cgroup: str | bytes, said: str) -> None:
    machine.v1(machine.top / "cpu", "/")
    machine.write(machine.proc / str(PID) / "cgroup", cgroup)
    with pytest.raises(CgroupError, match=said):
        read_cpu(PID, proc=machine.proc)


def test_mangled_mountinfo_lines_are_passed_over(machine: Machine) -> None:
    directory = limited_v1(machine)
    text = (machine.proc / "self" / "mountinfo").read_text()
    machine.write(machine.proc / "self" / "mountinfo", "garbage\n1 2 3 - -\n\n" + text)
    assert read_cpu(PID, proc=machine.proc).directory == directory


def reading(throttling: Throttling, at: float, path: str = "/a") -> CgroupCpu:
    return CgroupCpu(
        1, path, Path("/sys/fs/cgroup/cpu") / path.strip("/"), 0.2, 0.1, throttling, at
    )


def test_counters_that_go_backwards_say_so() -> None:
    before = reading(Throttling(50, 40, 2.0), 0.0)
    after = reading(Throttling(10, 5, 0.5), 3.0)
    with pytest.raises(CgroupError, match="went backwards"):
        after.since(before)
    assert cpu_line(before, after) == (
        "cpu limit 0.20 cores (cgroup v1 /a): throttling unknown: the cgroup's cpu.stat "
        "counters went backwards: it was replaced"
    )


def test_a_target_that_moved_says_so() -> None:
    line = cpu_line(
        reading(Throttling(1, 0, 0), 0.0, "/a"), reading(Throttling(2, 0, 0), 1.0, "/b")
    )
    assert line.endswith(
        "throttling unknown: the target moved from cgroup /a to /b during the span"
    )


@pytest.mark.parametrize(
    ("periods", "throttled", "said"),
    [
        (1000, 999, "throttled in 999 of 1000 periods (99%)"),
        (1000, 1, "throttled in 1 of 1000 periods (1%)"),
        (30, 30, "throttled in 30 of 30 periods (100%)"),
        (30, 0, "not throttled in 30 periods over 3.0 s"),
        (0, 0, "no period counted over 3.0 s"),
    ],
)
def test_the_sentence_follows_from_the_figures(periods: int, throttled: int, said: str) -> None:
    before = reading(Throttling(100, 10, 1.0), 10.0)
    after = reading(Throttling(100 + periods, 10 + throttled, 1.0 + throttled * 0.08), 13.0)
    assert said in cpu_line(before, after)


def test_unknown_before_the_span() -> None:
    after = reading(Throttling(1, 0, 0), 1.0)
    assert cpu_line(CpuUnknown("why"), after) == "cpu limit unknown: why"


def test_a_cgroup_that_does_not_list_the_target_is_not_taken(machine: Machine) -> None:
    directory = limited_v1(machine)
    machine.write(directory / "cgroup.procs", "1\n77\n")
    with pytest.raises(CgroupError, match="not found"):
        read_cpu(PID, proc=machine.proc)
