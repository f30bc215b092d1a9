"""The await chains the task scan follows past a task's own coroutine, read from real targets
(``targets/tasks_chains.py``) under each CPython version from 3.11 by the real native scanner:
the coroutines a running task is in, the tasks a ``gather`` or a ``TaskGroup`` waits for (each
after the chain of the task that awaits them), and an old-school Tornado ``@gen.coroutine``
awaited by a task, through Tornado's Runner. Every assert is on the folded lines' exact frames
and leaves.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sidecar.sample.tasks import snapshot
from tests.support.helpers import ROOT, Spawner, sidecar
from tests.support.pythons import interpreter
from tests.support.task_scans import await_lines, record_tasks, task_counts

TARGET = ROOT / "targets" / "tasks_chains.py"
SCANNED = ("3.11", "3.12", "3.13", "3.14", "3.15")
#: Snapshots taken at most to catch a task running.
TRIES = 200


def frame(function: str, line: int) -> str:
    return f"{function} (targets/tasks_chains.py:{line})"


def sleep_leaf(stack: str) -> str:
    """The stack with asyncio's sleep frame, whose line differs by version, named ``sleep``."""
    return re.sub(r";sleep \(asyncio/tasks\.py:\d+\);", ";sleep;", stack)


@pytest.mark.parametrize("version", SCANNED)
def test_a_running_task_shows_the_coroutines_it_is_in(spawn: Spawner, version: str) -> None:
    """``cruncher`` runs ``crunch``, which runs ``burn``: while it runs, its chain is both
    coroutines (not the task's own alone), after ``main``'s, which gathers it. ``crunch`` is
    in ``burn()`` nearly all the time, and for an instant at its ``sleep(0)`` (CI once read it
    there on 3.15)."""
    target = spawn.target("tasks_chains", python=interpreter(version))
    at = await_lines(TARGET)
    expected = {
        ";".join(
            [
                frame("main", at["main"]),
                frame("cruncher", at["cruncher"]),
                frame("crunch", at[line]),
                "[running]",
            ]
        )
        for line in ("crunching", "crunch")
    }
    seen: list[str] = []
    for _ in range(TRIES):
        folded = snapshot(target.pid)["folded"]
        running = [s for s in folded if "cruncher (" in s and s.endswith("[running]")]
        seen.extend(running)
        if running:
            break
    assert seen, "cruncher was never seen running"
    assert seen[0] in expected, (seen[0], expected)


@pytest.mark.parametrize("version", SCANNED)
def test_gathered_tasks_follow_the_task_that_gathers_them(spawn: Spawner, version: str) -> None:
    target = spawn.target("tasks_chains", python=interpreter(version))
    at = await_lines(TARGET)
    folded = {sleep_leaf(s) for s in snapshot(target.pid)["folded"]}
    gatherer = [frame("main", at["main"]), frame("gatherer", at["gatherer"])]
    for child in ("gathered_a", "gathered_b"):
        chain = [frame(child, at[child]), frame("leaf", at["leaf"]), "sleep", "[waiting]"]
        assert ";".join(gatherer + chain) in folded, sorted(folded)
    assert ";".join([*gatherer, "[waiting]"]) in folded, sorted(folded)


@pytest.mark.parametrize("version", SCANNED)
def test_a_task_groups_tasks_follow_the_task_in_it(spawn: Spawner, version: str) -> None:
    """``grouper`` waits in the ``TaskGroup``'s exit for ``member``: ``member``'s chain comes
    after ``grouper``'s, which ends in asyncio's own frames of the group's exit."""
    target = spawn.target("tasks_chains", python=interpreter(version))
    at = await_lines(TARGET)
    folded = [sleep_leaf(s) for s in snapshot(target.pid)["folded"]]
    tail = ";".join(
        [frame("member", at["member"]), frame("leaf", at["leaf"]), "sleep", "[waiting]"]
    )
    members = [s for s in folded if s.endswith(tail)]
    assert len(members) == 1, folded
    head = ";".join([frame("main", at["main"]), frame("grouper", at["grouper"])]) + ";"
    assert members[0].startswith(head), members[0]
    between = members[0][len(head) : -len(tail)].rstrip(";").split(";")
    assert between and all(
        re.fullmatch(r"TaskGroup\.\w+ \(asyncio/taskgroups\.py:\d+\)", f) for f in between
    ), members[0]


@pytest.mark.parametrize("version", SCANNED)
def test_tasks_nests_gathered_and_grouped_tasks_under_the_task_awaiting_them(
    spawn: Spawner, version: str
) -> None:
    """``sidecar tasks`` prints ``main``'s gathered tasks under it, ``gatherer``'s gathered
    tasks under it, and ``member`` under ``grouper``, whose ``TaskGroup`` holds it: each task
    header with the branches of the tree, and no gathered task at the top level."""
    target = spawn.target("tasks_chains", python=interpreter(version))
    at = await_lines(TARGET)
    result = sidecar("tasks", "--pid", str(target.pid))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()[1:]
    headers = [
        re.sub(r"'cruncher' \[\w+\].*", "'cruncher' [...]", re.sub(r"'Task-\d+'", "'Task-N'", line))
        for line in lines
        if re.match(r"[ │]*(?:[├└]─ )?'", line)
    ]
    assert headers == [
        "'Task-N' [waiting] awaits a Future",
        "    ├─ 'cruncher' [...]",
        "    ├─ 'gatherer' [waiting] awaits a Future",
        "    │      ├─ 'Task-N' [waiting] awaits a Future",
        "    │      └─ 'Task-N' [waiting] awaits a Future",
        "    └─ 'grouper' [waiting] awaits a Future",
        "           └─ 'member' [waiting] awaits a Future",
    ], result.stdout
    assert lines[1] == "    " + frame("main", at["main"])
    gatherer = lines.index("    ├─ 'gatherer' [waiting] awaits a Future")
    assert lines[gatherer + 1] == "    │      " + frame("gatherer", at["gatherer"])
    # the gathered tasks, in the order of their names (Task-N): each with its own chain
    first = [i for i, line in enumerate(lines) if re.match(r" +│ +[├└]─ 'Task-\d+'", line)]
    assert {lines[i + 1].lstrip(" │") for i in first} == {
        frame("gathered_a", at["gathered_a"]),
        frame("gathered_b", at["gathered_b"]),
    }, result.stdout
    assert lines[first[0] + 1].startswith("    │      │      gathered_")
    assert lines[first[1] + 1].startswith("    │             gathered_")
    member = lines.index("           └─ 'member' [waiting] awaits a Future")
    assert lines[member + 1 : member + 3] == [
        "                  " + frame("member", at["member"]),
        "                  " + frame("leaf", at["leaf"]),
    ]
    assert lines[member - 1].startswith("           TaskGroup.")


@pytest.mark.parametrize("version", SCANNED)
def test_a_task_parked_in_an_awaitables_generator_is_read_there(
    spawn: Spawner, tmp_path: Path, version: str
) -> None:
    """``gated`` awaits a ``Gate``, whose ``__await__`` generator parks in a bare ``yield`` of
    the future it waits on: a chain that ends at a plain generator is read again (the
    generator between two reads of the coroutine awaiting it) before it is taken, and one
    parked there stands, in a snapshot and in every scan of a recording."""
    target = spawn.target("tasks_awaitable", python=interpreter(version))
    at = await_lines(ROOT / "targets" / "tasks_awaitable.py")
    where = "targets/tasks_awaitable.py"
    expected = ";".join(
        [
            f"main ({where}:{at['main']})",
            f"gated ({where}:{at['gated']})",
            f"Gate.__await__ ({where}:{at['gate']})",
            "[waiting]",
        ]
    )
    assert expected in snapshot(target.pid)["folded"]
    out = tmp_path / "gated.folded"
    result = record_tasks(target.pid, out, duration=2)
    assert result.returncode == 0, result.stderr
    counts = task_counts(tmp_path / "gated.tasks.folded")
    scans = re.search(r"tasks: (\d+) scans", result.stderr)
    assert scans, result.stderr
    assert counts.get(expected) == int(scans.group(1)) > 40, (counts, result.stderr)
    assert re.search(r"· torn 0 ·", result.stderr), result.stderr


@pytest.mark.parametrize("version", ("3.12", "3.13", "3.14", "3.15"))
def test_a_task_started_eagerly_follows_the_task_whose_step_runs_it(
    spawn: Spawner, tmp_path: Path, version: str
) -> None:
    """``child`` is started with ``eager_start=True``: its first step runs inside ``parent``'s
    (which awaits it only next), burning CPU. Both tasks run on the thread at once; the child's
    stack in that step follows the parent's, never begins at its own coroutine. (Its second
    step, the return after its sleep, the loop runs on its own: a scan may catch it there.)"""
    target = spawn.target("tasks_eager", python=interpreter(version))
    at = await_lines(ROOT / "targets" / "tasks_eager.py")
    where = "targets/tasks_eager.py"
    out = tmp_path / "eager.folded"
    result = record_tasks(target.pid, out, duration=2)
    assert result.returncode == 0, result.stderr
    counts = task_counts(tmp_path / "eager.tasks.folded")
    nested = ";".join(
        [
            f"main ({where}:{at['main']})",
            f"parent ({where}:{at['parent']})",
            f"child ({where}:{at['child']})",
            "[running]",
        ]
    )
    assert counts.get(nested, 0) > 20, counts
    assert not [s for s in counts if s.startswith(f"child ({where}:{at['child']})")], counts


@pytest.mark.parametrize("version", ("3.12", "3.13", "3.14", "3.15"))
def test_a_task_made_eagerly_and_not_awaited_yet_is_its_own_root(
    spawn: Spawner, tmp_path: Path, version: str
) -> None:
    """``parent`` burns CPU for 20 ms between making ``child`` (eagerly: its first step runs
    at once and parks it in a 5 ms sleep) and awaiting it. Meanwhile no task awaits the child,
    and its stack begins at its own coroutine: in every scan that read the parent running there,
    not taken for a task that its maker began to await as the scan read it (those are left
    out as torn)."""
    target = spawn.target("tasks_eager", "--late", "0.02", python=interpreter(version))
    at = await_lines(ROOT / "targets" / "tasks_eager.py")
    where = "targets/tasks_eager.py"
    out = tmp_path / "late.folded"
    result = record_tasks(target.pid, out, duration=3)
    assert result.returncode == 0, result.stderr
    counts = {sleep_leaf(s): n for s, n in task_counts(tmp_path / "late.tasks.folded").items()}
    late = ";".join([f"main ({where}:{at['main']})", f"parent ({where}:{at['late']})", "[running]"])
    # parked in its 5 ms sleep: waiting, then ready (due, behind the parent's work)
    parked = sum(
        counts.get(f"child ({where}:{at['child_sleep']});sleep;[{state}]", 0)
        for state in ("waiting", "ready")
    )
    assert counts.get(late, 0) > 20, counts
    assert parked >= 0.9 * counts[late], counts


def test_an_old_school_tornado_coroutine_follows_the_task_awaiting_it(spawn: Spawner) -> None:
    """``old_request`` awaits the Tornado Future of a ``@gen.coroutine`` (under the venv's
    Python, which has Tornado): the task waits on that Future, and its chain goes on through
    Tornado's Runner to the generator's frame, parked where it yields ``gen.sleep``."""
    target = spawn.target("tasks_chains", "--tornado")
    at = await_lines(TARGET)
    scan = snapshot(target.pid)
    expected = ";".join(
        [
            frame("main", at["main"]),
            frame("old_request", at["old_request"]),
            frame("old_school.<locals>.old_work", at["old_work"]),
            "[waiting]",
        ]
    )
    assert expected in scan["folded"], scan["folded"]
    (task,) = [t for t in scan["tasks"] if t["name"] == "old_request"]
    assert (task["state"], task["future"]) == ("waiting", "Future")


@pytest.mark.parametrize("version", SCANNED)
def test_a_kept_chain_whose_middle_coroutine_changed_is_read_again(
    spawn: Spawner, tmp_path: Path, version: str
) -> None:
    """``staged`` awaits a 50 ms stage and a 150 ms stage in turn, from the same line; each
    stage's coroutine and its ``asyncio.sleep`` are made at the last stage's addresses (the
    futures at one of a few), so a chain kept from the last scan looks the same but for the
    stage between them. Scanned at 47 Hz for 4 s (each scan at a random instant of its
    period), the short stage holds about a quarter of the task-samples in a stage and the long
    one three quarters (within 0.1): kept chains of the wrong stage would tip the shares."""
    target = spawn.target("tasks_stages", python=interpreter(version))
    source = ROOT / "targets" / "tasks_stages.py"
    at = await_lines(source)
    out = tmp_path / "stages.folded"
    result = record_tasks(target.pid, out, duration=4)
    assert result.returncode == 0, result.stderr
    counts: dict[str, int] = {}
    for line in (tmp_path / "stages.tasks.folded").read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        counts[stack] = counts.get(stack, 0) + int(count)

    def stage(name: str, line: str) -> str:
        where = "targets/tasks_stages.py"
        return f"staged ({where}:{at['staged']});{name} ({where}:{at[line]})"

    short = sum(n for s, n in counts.items() if stage("short_stage", "short") in s)
    long = sum(n for s, n in counts.items() if stage("long_stage", "long") in s)
    assert short + long > 100, counts
    assert abs(short / (short + long) - 0.25) <= 0.1, (short, long, counts)
