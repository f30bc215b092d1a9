"""``sidecar record`` against real targets: states, deep and non-ASCII stacks, failures."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sidecar.classify.threads import is_loop_stack, state_counts
from sidecar.commands.record import summary
from sidecar.profile import Profile, parse_folded
from sidecar.sample.record import record as record_live
from tests.support.helpers import (
    PYTHON,
    ROOT,
    LoadDriver,
    Spawner,
    one_error_line,
    sidecar,
    wait_until,
)


def record(pid: int, out: Path, *args: str, duration: float = 3.0) -> Profile:
    result = sidecar(
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(duration),
        "--format",
        "folded",
        "-o",
        str(out),
        *args,
    )
    assert result.returncode == 0, result.stderr
    return parse_folded(out.read_text())


def shares(profile: Profile) -> dict[str, float]:
    counts = state_counts(profile.stacks)
    total = sum(counts.values())
    assert total > 0
    return {state: count / total for state, count in counts.items()}


def test_busy_pure_python_loop_is_busy(spawn: Spawner, tmp_path: Path) -> None:
    target = spawn.target("spin")
    profile = record(target.pid, tmp_path / "spin.txt", duration=2)
    assert shares(profile)["busy"] >= 0.90


def test_idle_aiohttp_on_uvloop_is_idle(spawn: Spawner, tmp_path: Path) -> None:
    target = spawn.target("aiohttp_app", "--uvloop")
    profile = record(target.pid, tmp_path / "a.txt")
    assert shares(profile)["idle"] >= 0.95
    # the idle wait is the frame that entered the C loop, nothing above it
    loop = {s: c for s, c in profile.stacks.items() if is_loop_stack(s)}
    top = max(loop, key=loop.__getitem__).split(";")
    assert top[-1] == "[idle]" and top[-2].startswith("run_app (aiohttp/web.py:")


def test_idle_tornado_on_asyncio_is_idle(spawn: Spawner, tmp_path: Path) -> None:
    target = spawn.target("tornado_app")
    profile = record(target.pid, tmp_path / "t.txt")
    assert shares(profile)["idle"] >= 0.95


@pytest.mark.parametrize(
    ("module", "path", "call"),
    [
        ("tornado_app", "/blocking", "blocking_sleep (targets/handlers.py:"),
        ("aiohttp_app", "/blocking", "blocking_sleep (targets/handlers.py:"),
        ("tornado_app", "/blocking-fetch", "SocketIO.readinto (socket.py:"),
    ],
)
def test_blocking_call_shows_as_blocked_with_its_call(
    spawn: Spawner, load: LoadDriver, tmp_path: Path, module: str, path: str, call: str
) -> None:
    target = spawn.target(module)
    load.start(target.url + path, seconds=5)
    time.sleep(0.5)
    profile = record(target.pid, tmp_path / "b.txt", duration=3)
    assert shares(profile)["blocked"] >= 0.5
    blocked = {s: c for s, c in profile.stacks.items() if s.endswith(";[blocked]")}
    top = max(blocked, key=blocked.__getitem__)
    assert top.split(";")[-2].startswith(call), top


def test_500_frames_deep_and_non_ascii_names_come_through(spawn: Spawner, tmp_path: Path) -> None:
    target = spawn.target("spin", "--depth", "500", "--unicode")
    profile = record(target.pid, tmp_path / "deep.txt", duration=1.5)
    top = max(profile.stacks, key=profile.stacks.__getitem__)
    frames = top.split(";")
    assert sum(f.startswith("rückwärts_tiefer (targets/spin.py:") for f in frames) == 500
    svg_out = tmp_path / "deep.svg"
    result = sidecar("render", str(tmp_path / "deep.txt"), "-o", str(svg_out))
    assert result.returncode == 0, result.stderr
    assert "rückwärts_tiefer" in svg_out.read_text(encoding="utf-8")


def test_target_exiting_mid_recording_keeps_a_partial_profile(
    spawn: Spawner, tmp_path: Path
) -> None:
    # 3 s from its own start: the sidecar's own start-up on a loaded machine may take a second
    target = spawn.target("spin", "--seconds", "3")
    out = tmp_path / "partial.txt"
    result = sidecar(
        "record", "--pid", str(target.pid), "--duration", "20", "--format", "folded", "-o", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert f"PID {target.pid} exited" in result.stderr
    assert 50 <= parse_folded(out.read_text()).total <= 400


def test_not_python_process(spawn: Spawner) -> None:
    popen = spawn.command("sleep", "30")
    time.sleep(0.2)
    line = one_error_line(sidecar("record", "--pid", str(popen.pid), "--duration", "1"))
    assert "does not look like a Python process" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a sidecar as another user")
def test_target_that_may_not_be_traced(spawn: Spawner, tmp_path: Path) -> None:
    """An unprivileged sidecar may not read a root-owned target: one line naming the fix."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is required"
    target = spawn.target("spin", "--sleep")
    env = dict(os.environ, HOME=str(tmp_path))
    result = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            PYTHON,
            "-m",
            "sidecar",
            "record",
            "--pid",
            str(target.pid),
            "--duration",
            "1",
            "-o",
            "-",  # a file under tmp_path would be refused first: 65534 may not enter it
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    line = one_error_line(result)
    assert "CAP_SYS_PTRACE" in line and "shareProcessNamespace" in line


def test_formats_cpu_and_threads(spawn: Spawner, load: LoadDriver, tmp_path: Path) -> None:
    target = spawn.target("aiohttp_app")
    load.start(target.url + "/cpu", seconds=20, connections=2)  # stopped when the test ends
    time.sleep(0.5)
    base = ("record", "--pid", str(target.pid), "--duration", "2")
    svg, speed, cpu, threads = (tmp_path / n for n in ("p.svg", "p.json", "cpu.txt", "thr.txt"))
    assert sidecar(*base, "-o", str(svg)).returncode == 0
    assert ET.parse(svg).getroot().tag.endswith("svg")
    assert "classify_path" in svg.read_text()
    assert sidecar(*base, "--format", "speedscope", "-o", str(speed)).returncode == 0
    doc = json.loads(speed.read_text())
    assert doc["profiles"][0]["type"] == "sampled" and sum(doc["profiles"][0]["weights"]) > 100
    assert sidecar(*base, "--cpu", "--format", "folded", "-o", str(cpu)).returncode == 0
    cpu_stacks = parse_folded(cpu.read_text()).stacks
    assert not any(s.endswith(("[idle]", "[blocked]")) for s in cpu_stacks)
    assert any("XClassifier.next_char" in s for s in cpu_stacks)
    assert sidecar(*base, "--threads", "--format", "folded", "-o", str(threads)).returncode == 0
    roots = {s.split(";", 1)[0] for s in parse_folded(threads.read_text()).stacks}
    assert f"thread (MainThread {target.pid})" in roots
    assert any(r.startswith("thread (pretend-service ") for r in roots)


def test_blocking_mode_records_and_releases_the_target(spawn: Spawner, tmp_path: Path) -> None:
    target = spawn.target("tornado_app")
    profile = record(target.pid, tmp_path / "blk.txt", "--blocking", duration=2)
    assert profile.total > 100
    with open(f"/proc/{target.pid}/status") as handle:
        status = dict(line.split(":", 1) for line in handle)
    assert status["State"].strip()[0] not in "Tt"
    assert status["TracerPid"].strip() == "0"
    assert target.get("/health") == b"ok\n"


def test_a_target_that_tears_most_reads_is_told_to_use_blocking_mode(
    spawn: Spawner, tmp_path: Path
) -> None:
    """``targets/chunks.py`` changes its 100-700-frame stack faster than a read: about a third
    of the ticks here tear on every try and read no sample. The summary says how many and that
    ``--blocking`` reads the target paused; with it, that line is gone."""
    target = spawn.target("chunks", "--seconds", "30", "--settle", "0")
    result = sidecar(
        "record", "--pid", str(target.pid), "--duration", "3", "--rate", "200",
        "--format", "folded", "-o", str(tmp_path / "torn.txt"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "--blocking pauses it" in line]
    assert len(warned) == 1, result.stderr
    share = float(warned[0].split("%")[0])
    assert share >= 5, warned
    result = sidecar(
        "record", "--pid", str(target.pid), "--duration", "3", "--rate", "200", "--blocking",
        "--format", "folded", "-o", str(tmp_path / "stopped.txt"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--blocking pauses it" not in result.stderr, result.stderr
    read = re.search(r"ticks ([\d,]+) in .* · errors ([\d,]+) ·", result.stderr)
    assert read, result.stderr
    samples, errors = (int(n.replace(",", "")) for n in (read[1], read[2]))
    assert samples > 300 and errors < 0.05 * (samples + errors), result.stderr


#: A program that spins in a function of its own for about 1.5 s, then exits.
SPINS = (
    "import time\ndef spin_here(end):\n    while time.time() < end: pass\n"
    "spin_here(time.time() + 1.5)\n"
)


def test_record_starts_a_program_and_samples_it_until_it_exits(tmp_path: Path) -> None:
    out = tmp_path / "run.folded"
    result = sidecar("record", "-d", "60", "-f", "folded", "-o", str(out), "--", PYTHON, "-c",
                     SPINS)  # fmt: skip
    assert result.returncode == 0, result.stderr
    profile = parse_folded(out.read_text())
    spinning = sum(n for stack, n in profile.stacks.items() if "spin_here (<string>:" in stack)
    assert spinning > 0.5 * profile.total, profile.stacks
    assert re.search(
        r"(?m)^PID \d+ exited after \d+\.\d s; wrote what was recorded$", result.stderr
    )
    said = shlex.join([str(PYTHON), "-c", SPINS]).replace("\n", "\\n")
    assert result.stderr.rstrip().endswith(f"{said} exited with status 0"), result.stderr


def test_a_started_program_that_outlives_the_recording_is_stopped(tmp_path: Path) -> None:
    out = tmp_path / "run.folded"
    forever = "import time\nwhile True: time.sleep(0.01)\n"
    result = sidecar("record", "-d", "1", "-f", "folded", "-o", str(out), "--", PYTHON, "-c",
                     forever)  # fmt: skip
    assert result.returncode == 0, result.stderr
    stopped = re.search(r"(?m)^stopped .* \(PID (\d+)\) as the recording ended$", result.stderr)
    assert stopped, result.stderr
    assert not Path(f"/proc/{stopped[1]}").exists()  # ended and reaped
    assert out.read_text()


def test_a_program_that_cannot_start_or_is_no_python_is_one_line(tmp_path: Path) -> None:
    out = str(tmp_path / "x.svg")
    line = one_error_line(sidecar("record", "-d", "5", "-o", out, "--", "/nonexistent/program"))
    assert line == "sidecar: error: cannot start /nonexistent/program: No such file or directory"
    # no interpreter to attach to, and it ends: said once it has
    line = one_error_line(sidecar("record", "-d", "5", "-o", out, "--", "/bin/true"))
    assert line == "sidecar: error: /bin/true exited with status 0 before sidecar could attach"
    assert not Path(out).exists()


def test_a_started_program_that_is_not_python_is_said_so_at_once_and_stopped(
    tmp_path: Path,
) -> None:
    """``record -- /bin/sleep 60`` said so only once the program exited; a second after its
    exec it is said not to be a Python program, and stopped (the call's timeout is shorter
    than the program)."""
    out = tmp_path / "x.svg"
    line = one_error_line(sidecar("record", "-o", str(out), "--", "/bin/sleep", "60", timeout=30))
    said = re.fullmatch(
        r"sidecar: error: /bin/sleep 60 is not a Python program: PID (\d+) runs (\S+), with no "
        r"libpython loaded \(stopped it\); record samples the program it starts, not the "
        r"programs that one starts",
        line,
    )
    assert said, line
    assert Path(said[2]).name == "sleep"
    assert not Path(f"/proc/{said[1]}").exists()  # ended and reaped
    assert not out.exists()
    # a program that executes Python after a moment (a shell script's `exec python`) is waited for
    script = f"sleep 0.3; exec {shlex.quote(str(PYTHON))} -c {shlex.quote(SPINS)}"
    result = sidecar("record", "-f", "folded", "-o", str(out), "--", "/bin/sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert any("spin_here (<string>:" in s for s in parse_folded(out.read_text()).stacks)


def test_the_summary_writes_every_count_with_thousands_separators(spawn: Spawner) -> None:
    """One style of count in the summary: a recording of a real target whose counters are set
    past a thousand (a sampler on a loaded host gets there: "late 1724 · missed 6762" once
    stood beside "23,281") prints each with its separators."""
    target = spawn.target("spin")
    rec = record_live(target.pid, duration=0.5)
    big = {"errors": 1234, "late": 1724, "missed": 6762, "retried": 2345}
    rec = dataclasses.replace(rec, stats={**rec.stats, **big})  # type: ignore[typeddict-item]
    line = summary(rec)[0]
    for name, count in big.items():
        assert f"{name} {count:,} ·" in line, line
    assert not re.search(r"(?<![\d.,])\d{4,}", line), line


#: A program that imports asyncio (and with it `threading`, where thread names are kept) half
#: a second after it starts, then holds its event loop 0.3 s in ``hold_the_loop`` after
#: ``{wait}`` seconds.
STALLS_LATE = """import time
time.sleep(0.5)
import asyncio
def hold_the_loop():
    time.sleep(0.3)
async def main():
    await asyncio.sleep({wait})
    hold_the_loop()
    await asyncio.sleep(0.5)
asyncio.run(main())
"""


def _stall_thread(stderr: str) -> str:
    """The thread named under the stall held in ``hold_the_loop``, in the summary's table."""
    lines = stderr.splitlines()
    row = next(
        i for i, line in enumerate(lines) if re.match(r" *\d+\.\d+ s.* at hold_the_loop \(", line)
    )
    named = re.search(r"\(([^()]*)\)$", lines[row + 1])
    assert named, stderr
    return named[1]


def test_a_stall_names_its_thread_the_same_for_a_started_program_and_a_pid(
    spawn: Spawner, tmp_path: Path
) -> None:
    """A program started by ``record --`` is attached to before it imports `threading`: its
    thread's name is looked up again once there is one, so the stall's row says MainThread,
    as it does under ``--pid``, not "thread 29940"."""
    out = str(tmp_path / "s.txt")
    started = sidecar("record", "-f", "folded", "-o", out, "--", PYTHON, "-c",
                      STALLS_LATE.format(wait=1.5))  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert _stall_thread(started.stderr) == "MainThread", started.stderr
    popen = spawn.command(str(PYTHON), "-c", STALLS_LATE.format(wait=3.5))
    by_pid = sidecar("record", "-p", str(popen.pid), "-d", "10", "-f", "folded", "-o", out,
                     "--force")  # fmt: skip
    assert by_pid.returncode == 0, by_pid.stderr
    assert _stall_thread(by_pid.stderr) == "MainThread", by_pid.stderr


def test_a_prefork_group_into_one_profile_each_process_at_its_root(
    spawn: Spawner, tmp_path: Path
) -> None:
    """``record -s`` samples a pre-fork group (Tornado's master and 2 forked workers) into one
    profile, each process's stacks under ``process PID:"COMMAND"`` as py-spy writes them; a
    worker the master starts again after one is killed is sampled too, from when it joins."""
    master = spawn.target("tornado_app", "--processes", "2", "--max-restarts", "1")

    def workers() -> list[int]:
        path = Path(f"/proc/{master.pid}/task/{master.pid}/children")
        return sorted(int(pid) for pid in path.read_text().split())

    assert wait_until(lambda: len(workers()) == 2, timeout=30)
    first = workers()
    out = tmp_path / "group.folded"
    argv = [PYTHON, "-m", "sidecar", "record", "--pid", str(first[0]), "-s", "-d", "5"]
    recording = subprocess.Popen(
        [*argv, "-f", "folded", "-o", str(out)], cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.5)
        os.kill(first[1], signal.SIGKILL)  # the master forks a new worker in its place
        assert wait_until(lambda: len(set(workers()) - set(first)) == 1, timeout=10)
        (joined,) = set(workers()) - set(first)
        _, stderr = recording.communicate(timeout=60)
    finally:
        recording.kill()
        for pid in workers():
            os.kill(pid, signal.SIGTERM)
    assert recording.returncode == 0, stderr
    profile = parse_folded(out.read_text())
    roots = {stack.split(";", 1)[0] for stack in profile.stacks}
    processes = {int(re.match(r'process (\d+):"', root)[1]) for root in roots}  # type: ignore[index]
    assert processes == {master.pid, *first, joined}, roots
    assert all(root.endswith('"') and "tornado_app" in root for root in roots), roots
    # each process's summary under its heading; the new worker said as it joined
    assert f"PID {master.pid} (master): " in stderr and f"PID {first[0]} (worker): " in stderr
    assert f"PID {joined} of the group sampled too" in stderr, stderr
    # the workers' loops, and the master's threads (it runs none)
    assert stderr.count("\nevent loop: ") == 3, stderr
    assert stderr.count("\nall threads (no event loop seen): ") == 1, stderr
    # the worker killed: over the span it ran, not the recording's
    killed = re.search(rf"PID {first[1]}: .*\nticks [\d,]+ in ([\d.]+) s", stderr)
    assert killed is not None and float(killed[1]) < 4, stderr
    # read back: the loop's shares of every process together, idle servers
    shares = json.loads(sidecar("stats", str(out), "--json").stdout)["targets"][0]
    assert shares["idle_share"] > 0.9, shares
