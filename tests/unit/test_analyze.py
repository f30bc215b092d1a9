"""Analysis arithmetic on hand-written folded stacks: states, depth percentiles, layers, sites
and merging (the analysis of real recordings: tests/live/test_analyze_recordings.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sidecar.analyze.stats import stats_document
from sidecar.analyze.threads import Depth, analyze, by_framework, state_line
from sidecar.classify.process import ProcessInfo
from sidecar.profile import parse_folded
from sidecar.rules.layers import layer_of_file, module_of

# -- arithmetic on hand-written stacks ------------------------------------------------------------

LOOP = "main (app.py:3);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
RUN_ONCE = LOOP + ";BaseEventLoop._run_once (asyncio/base_events.py:1922)"
RUN = RUN_ONCE + ";Handle._run (asyncio/events.py:80)"
EXECUTE = "RequestHandler._execute (tornado/web.py:1)"
FOLDED = f"""\
{RUN_ONCE};EpollSelector.select (selectors.py:468);[idle] 60
{RUN};handler (app.py:10);time.sleep (app.py:11);[blocked] 15
{RUN};other (app.py:20);[blocked] 5
{RUN};{EXECUTE} 10
{RUN};handler (app.py:10);dumps (json/__init__.py:2) 6
{RUN};{EXECUTE};handler (app.py:10) 4
thread (worker 7);work (pool.py:1);[idle] 500
"""


def test_states_depth_layers_and_sites_of_a_marked_profile() -> None:
    analysis = analyze(parse_folded(FOLDED))
    # the worker is not a loop
    assert analysis.states == {"busy": 20, "idle": 60, "blocked": 20, "gil": 0, "cpu_wait": 0}
    assert not analysis.estimated and not analysis.no_loop_thread
    # busy depths: 10 samples at 5 frames, 6 at 6 (json counts), 4 at 6
    assert analysis.depth == Depth(mean=5.5, p50=5, p95=6, max=6)
    # above run_forever: _run_once, Handle._run, then 1 or 2 frames
    assert analysis.loop_depth == Depth(mean=3.5, p50=3, p95=4, max=4)
    assert analysis.layers == {"framework": 10, "event_loop": 0, "application": 10, "other": 0}
    sites = analysis.blocking_sites()
    assert [(s.name, s.samples, s.share) for s in sites] == [
        ("time.sleep (app.py:11)", 15, 0.75),
        ("other (app.py:20)", 5, 0.25),
    ]
    assert analysis.top_self(1)[0].name == "RequestHandler._execute (tornado/web.py)"
    # frames up to the loop entry are in every sample and are not ranked
    names = [r.name for r in analysis.top_total(50)]
    assert (
        "main (app.py)" not in names
        and names[0] == "BaseEventLoop._run_once (asyncio/base_events.py)"
    )
    assert analysis.framework == "tornado" and analysis.loop == "asyncio"


def test_unmarked_profile_is_estimated_from_the_selector_wait() -> None:
    text = "\n".join(
        line.replace(";[idle]", "").replace(";[blocked]", "") for line in FOLDED.splitlines()
    )
    profile = parse_folded(text)
    assert not profile.marked
    analysis = analyze(profile)
    assert analysis.estimated
    # the selector's wait tells idle; the other 40 samples were busy (20) or blocked (20), and
    # nothing in the file says which: no share is given for them
    assert analysis.told == ("idle",)
    assert analysis.states == {"busy": 0, "idle": 60, "blocked": 0, "gil": 0, "cpu_wait": 0}
    assert (analysis.untold, analysis.samples, analysis.ranked) == (40, 100, 40)
    assert state_line(analysis) == (
        "idle 60.0% · busy, blocked, gil, cpu_wait: not told by this file (40.0% of samples)"
    )
    document = stats_document([analysis])["targets"][0]
    assert document["busy_share"] is None and document["blocked_share"] is None
    assert (document["idle_share"], document["untold_share"]) == (0.6, 0.4)
    # the depth and top functions are those of the samples outside the poll
    assert analysis.top_self(1)[0].share == pytest.approx(15 / 40)  # time.sleep


def test_an_unmarked_uvloop_profile_tells_no_state() -> None:
    # uvloop's poll is C: an idle loop shows no frame above the one that entered it
    entry = "main (app.py:3);run (asyncio/runners.py:118);run_until_complete (uvloop/loop.pyx:1)"
    profile = parse_folded(f"{entry} 90\n{entry};handler (app.py:10) 10\n")
    analysis = analyze(profile)
    assert analysis.loop == "uvloop" and analysis.told == ()
    assert (analysis.untold, analysis.samples) == (100, 100)
    assert state_line(analysis) == (
        "busy, idle, blocked, gil, cpu_wait: not told by this file (100.0% of samples)"
    )


def test_pruned_width_counts_as_no_state() -> None:
    profile = parse_folded(FOLDED + f"{RUN};handler (app.py:10);[pruned] 25\n")
    analysis = analyze(profile)
    assert analysis.states == {"busy": 20, "idle": 60, "blocked": 20, "gil": 0, "cpu_wait": 0}
    assert (analysis.untold, analysis.pruned, analysis.samples) == (25, 25, 125)
    assert state_line(analysis).endswith("· not drawn 20.0% (frames too narrow, no state)")
    assert stats_document([analysis])["targets"][0]["pruned_share"] == 0.2


def test_depth_percentiles_are_nearest_rank() -> None:
    depth = Depth.from_histogram({10: 50, 20: 45, 30: 5})
    assert depth == Depth(mean=15.5, p50=10, p95=20, max=30)
    assert Depth.from_histogram({}) == Depth()
    assert Depth().to_json() == {"mean": None, "p50": None, "p95": None, "max": None}


@pytest.mark.parametrize(
    ("file", "module", "layer"),
    [
        ("asyncio/base_events.py", "asyncio", "event_loop"),
        ("selectors.py", "selectors", "event_loop"),
        ("aiohttp/web_protocol.py", "aiohttp", "framework"),
        ("/srv/venv/lib/python3.12/site-packages/tornado/web.py", "tornado", "framework"),
        ("/usr/lib/python3.12/json/__init__.py", "json", None),
        ("<frozen runpy>", "<frozen runpy>", None),
        ("targets/handlers.py", "targets", "application"),
        ("/srv/app/service.py", "srv", "application"),
    ],
)
def test_layer_of_a_file(file: str, module: str, layer: str | None) -> None:
    assert module_of(file) == module
    assert layer_of_file(file) == layer


def test_frameworks_merge_their_targets() -> None:
    one = analyze(parse_folded(FOLDED))
    two = analyze(parse_folded(FOLDED))
    merged = by_framework([one, two])["tornado"]
    assert merged.states == {"busy": 40, "idle": 120, "blocked": 40, "gil": 0, "cpu_wait": 0}
    assert merged.depth == one.depth
    assert merged.blocking_sites(1)[0].samples == 30
    doc = stats_document([one, two])
    assert len(doc["targets"]) == 2
    assert doc["frameworks"]["tornado"]["samples"] == 200
    assert doc["frameworks"]["tornado"]["blocked_share"] == 0.2


def test_a_master_and_a_process_without_a_loop_count_in_no_framework() -> None:
    info = ProcessInfo(1, 0, "python app.py", "3.11", "tornado", "asyncio")
    worker = analyze(parse_folded(FOLDED), replace(info, pid=2, role="worker"))
    master = analyze(parse_folded(FOLDED), replace(info, pid=1, role="master"))
    # a thread pool's waits only: no thread entered an event loop
    no_loop = parse_folded(
        "Thread.run (threading.py:1);Condition.wait (threading.py:2);[idle] 50\n"
    )
    idle = analyze(no_loop, replace(info, pid=3))
    assert worker.serves and not master.serves and not idle.serves and idle.no_loop_thread
    doc = stats_document([master, worker, idle])
    assert [(t["pid"], t["role"]) for t in doc["targets"]] == [
        (1, "master"),
        (2, "worker"),
        (3, None),
    ]
    assert doc["frameworks"]["tornado"]["samples"] == worker.samples == 100
    assert doc["frameworks"]["tornado"]["idle_share"] == round(worker.share("idle"), 4)
    assert stats_document([master, idle])["frameworks"] == {}


def test_gil_holders_and_the_collector_in_shares_lines_and_json() -> None:
    loop = (
        "main (app.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
        ";BaseEventLoop._run_once (asyncio/base_events.py:1884)"
    )
    folded = (
        f"{loop};EpollSelector.select (selectors.py:468);[gil] 60\n"
        f"{loop};EpollSelector.select (selectors.py:468);[idle] 20\n"
        f"{loop};Handle._run (asyncio/events.py:80);handler (app.py:9) 15\n"
        f"{loop};Handle._run (asyncio/events.py:80);handler (app.py:9);[gc] 5\n"
    )
    holders = {("asyncio_0", "crunch (jobs.py:3)"): 30, ("asyncio_1", "crunch (jobs.py:3)"): 15,
               ("cruncher", "spin (jobs.py:9)"): 15}  # fmt: skip
    analysis = analyze(parse_folded(folded), holders=holders)
    assert analysis.states == {"busy": 20, "idle": 20, "blocked": 0, "gil": 60, "cpu_wait": 0}
    assert analysis.gc_samples == 5 and analysis.gc_share == pytest.approx(0.05)
    # a pool's threads are one holder
    assert analysis.top_holders() == [
        ("asyncio_*", "crunch (jobs.py:3)", 45, 0.75),
        ("cruncher", "spin (jobs.py:9)", 15, 0.25),
    ]
    assert state_line(analysis) == (
        "busy 20.0% · idle 20.0% · blocked 0.0% · gil 60.0% "
        "(GIL held by 'asyncio_*' at crunch (jobs.py:3) 75%) · cpu_wait 0.0% · gc 25.0% of busy"
    )
    target = stats_document([analysis])["targets"][0]
    assert (target["gil_share"], target["gc_share"]) == (0.6, 0.05)
    assert target["gil_holders"][0] == {"thread": "asyncio_*", "site": "crunch (jobs.py:3)",
                                        "share": 0.75}  # fmt: skip
    # a profile file keeps the [gil] samples, not who held the GIL
    assert not analyze(parse_folded(folded)).top_holders()
