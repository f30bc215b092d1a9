"""The task profile of ``sidecar record --tasks`` on real aiohttp and Tornado services (asyncio
and uvloop) under load, against what the services measure themselves: the shares of
task-samples at each await site of /stages, and the ready share of requests, which rises when
CPU work saturates the loop. aiohttp under the venv's Python (3.11) on both loops, and under
3.12 to 3.15 on asyncio (their aiohttp from ``pythons.frameworks_site``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from sidecar.rules.tasks import NO_ROUTE, is_request
from tests.support.helpers import PYTHON, ROOT, LoadDriver, Proc, Spawner
from tests.support.pythons import frameworks_site, interpreter
from tests.support.task_scans import await_lines, record_tasks, task_counts

#: Per framework: the demo service, the frame of its /stages handler, and how the chain of a
#: request's task begins (aiohttp: the connection's task, which awaits the request's; Tornado:
#: the request's own task).
APPS = {
    "aiohttp": ("aiohttp_app", "stages_handler", "RequestHandler.start (aiohttp/web_protocol.py:"),
    "tornado": ("tornado_app", "StagesHandler.get", "RequestHandler._execute (tornado/web.py:"),
}
LOOPS = ("asyncio", "uvloop")
#: (framework, loop, Python version): both loops under the venv's 3.11, asyncio under the rest.
VARIANTS = [(app, loop, "3.11") for app in APPS for loop in LOOPS] + [
    (app, "asyncio", version) for app in APPS for version in ("3.12", "3.13", "3.14", "3.15")
]


def start(spawn: Spawner, app: str, loop: str, version: str = "3.11") -> Proc:
    """The demo service of ``app`` on ``loop`` under Python ``version`` (3.11: the venv's)."""
    args = ["--uvloop"] if loop == "uvloop" else []
    if version == "3.11":
        return spawn.target(APPS[app][0], *args, python=PYTHON)
    python = interpreter(version)
    return spawn.target(APPS[app][0], *args, python=python, path=frameworks_site(version))


@pytest.mark.parametrize(("app", "loop", "version"), VARIANTS)
def test_the_shares_of_await_sites_are_the_time_requests_spent_there(
    spawn: Spawner, load: LoadDriver, tmp_path: Path, app: str, loop: str, version: str
) -> None:
    """Requests to /stages wait 30 ms on fetch, then 10 ms on store: of the task-samples of
    requests at either await, fetch holds the share of the time the requests spent there, as
    the service measured it (about three quarters; the loop's delays count in both), within
    0.08. The scans run at 97 Hz, each at a random instant of its period, for 5 s: about 1,900
    task-samples (at 47 Hz, 900, the share's standard deviation over 18 runs was 0.023 and
    one CI run fell 0.081 short; at 97 Hz, over 36 runs, 0.014, and at most 0.029 off). A request's
    stack begins with its route, then its chain as its framework runs requests (all but the
    few whose read tore, under 2%, which begin with the chain)."""
    module, handler, root = APPS[app]
    target = start(spawn, app, loop, version)
    load.start(target.url + "/stages", seconds=9, connections=4)
    time.sleep(0.5)
    before = json.loads(target.get("/stages-time"))
    out = tmp_path / "profile.folded"
    result = record_tasks(target.pid, out, duration=5, rate=97)
    after = json.loads(target.get("/stages-time"))
    assert result.returncode == 0, result.stderr
    assert out.read_text().strip(), "the thread profile is written too"
    counts = task_counts(tmp_path / "profile.tasks.folded")
    assert f"of {sum(counts.values()):,} task-samples" in result.stderr, result.stderr
    at = await_lines(ROOT / "targets" / f"{module}.py")
    frame = "{} (targets/" + module + ".py:{})"
    fetch = ";".join(
        [frame.format(handler, at["stages_fetch"]), frame.format("fetch", at["fetch"])]
    )
    store = ";".join(
        [frame.format(handler, at["stages_store"]), frame.format("store", at["store"])]
    )
    at_fetch = sum(n for stack, n in counts.items() if fetch in stack)
    at_store = sum(n for stack, n in counts.items() if store in stack)
    spent = {stage: after[stage] - before[stage] for stage in ("fetch", "store")}
    # on failure: the scans' summary, the time the service spent in each stage, and the stacks
    summary = [line for line in result.stderr.splitlines() if line.startswith("tasks:")]
    most = sorted(counts.items(), key=lambda item: -item[1])[:8]
    assert at_fetch + at_store > 300, (at_fetch, at_store, summary, spent, most)
    expected = spent["fetch"] / (spent["fetch"] + spent["store"])
    share = at_fetch / (at_fetch + at_store)
    assert abs(share - expected) <= 0.08, (share, expected, at_fetch, at_store)
    unrouted = 0
    for stack, n in counts.items():
        if fetch in stack or store in stack:
            # its route frame first (the route /stages, or none yet for a task caught before
            # aiohttp routed it), then the chain as the framework runs requests; or, for a
            # request whose read tore (its task finished between the scan's read of its chain
            # and of its request: a few in a thousand under this load), the chain alone
            if re.match(rf"\[GET (/stages|{re.escape(NO_ROUTE)})\];", stack):
                assert stack.partition(";")[2].startswith(root), stack
            else:
                assert stack.startswith(root), stack
                unrouted += n
            assert is_request(stack), stack
            # parked in asyncio.sleep; or caught running as it resumes, in sleep or already back
            # in its own frame (a running task's chain holds the coroutines it is in)
            in_sleep = r";sleep \(asyncio/tasks\.py:\d+\);\[(waiting|ready|running)\]$"
            assert re.search(in_sleep, stack) or re.search(r";\[(ready|running)\]$", stack), stack
    assert unrouted <= 0.02 * (at_fetch + at_store), (unrouted, at_fetch, at_store)


def ready_share(counts: dict[str, int]) -> tuple[float, int]:
    """The share of requests' task-samples that were ready (due to run, queued behind other
    work), and how many task-samples of requests there were."""
    requests = {stack: n for stack, n in counts.items() if is_request(stack)}
    total = sum(requests.values())
    ready = sum(n for stack, n in requests.items() if stack.endswith(";[ready]"))
    return (ready / total if total else 0.0), total


@pytest.mark.parametrize(("app", "loop"), [(app, loop) for app in APPS for loop in LOOPS])
def test_the_ready_share_of_requests_rises_when_cpu_work_saturates_the_loop(
    spawn: Spawner, load: LoadDriver, tmp_path: Path, app: str, loop: str
) -> None:
    """The same /stages requests, alone and then beside requests that keep the loop busy with
    CPU work (/cpu, about 2,000 path classifications each): the requests' sleeps end on time,
    but their tasks then wait their turn (due to run, their timers or wakeups behind the CPU
    work), and the /cpu requests queue behind each other, so the share of the requests'
    task-samples that are ready rises (Tornado's on a quiet machine: 0.7-4% calm, 29-53%
    saturated; the "many coroutines in the scheduler" of "Tornado vs Aiohttp: a journey into
    the wilds of asynchronous frameworks", Avito). On uvloop, whose due timers are out of the
    scan's reach, the /stages requests' own share hardly moves under Tornado (0-1% in both
    phases): there the rise is the /cpu requests'."""
    target = start(spawn, app, loop)
    shares: dict[str, tuple[float, int]] = {}
    for phase in ("calm", "saturated"):
        runs = [load.start(target.url + "/stages", seconds=6, connections=4)]
        if phase == "saturated":
            runs.append(load.start(target.url + "/cpu?repeat=2000", seconds=6, connections=4))
        time.sleep(0.5)
        out = tmp_path / f"{phase}.folded"
        result = record_tasks(target.pid, out, duration=4)
        assert result.returncode == 0, result.stderr
        shares[phase] = ready_share(task_counts(tmp_path / f"{phase}.tasks.folded"))
        assert shares[phase][1] > 200, shares
        for run in runs:
            run.stop()
    calm, saturated = shares["calm"][0], shares["saturated"][0]
    # in one CI run on a loaded machine Tornado's rose least: 2.2% to 4.7%
    assert saturated > 1.5 * calm + 0.01, shares
