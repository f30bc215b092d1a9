"""Large profiles read and analyzed quickly give the figures of the slow way
(tests/support/analysis_oracle.py: every frame through the rules, every line through the
pattern): generated profiles of a service's shape (benchmarks/stacks.py) and of a million
stacks' shape, frames the rules treat apart, with the kept frame facts bounded low so that they
are dropped and found again, and folded text cut into pieces at every place."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

import sidecar.analyze.threads as threads
import sidecar.formats.inputs as inputs
import sidecar.formats.svg_counts as svg_counts
import sidecar.profile as profile_module
from benchmarks.stacks import folded_lines
from sidecar.analyze.stats import stats_document
from sidecar.classify.stacks import Frames
from sidecar.errors import ProfileFormatError, SidecarError
from sidecar.formats.export import FORMATS
from sidecar.formats.inputs import load_profile
from sidecar.profile import Profile, parse_folded
from sidecar.rules.frames import PRUNED_LEAF
from tests.support import analysis_oracle as oracle
from tests.support.helpers import sidecar

LOOP = "<module> (srv.py:1);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
#: Stacks whose frames the rules treat apart: roots of threads and processes, synthetic frames
#: in the middle, texts that are almost frames, Windows paths, uvloop, lines of other digits.
ODD = [
    f"process (12);thread (MainThread 7);{LOOP};handler (app.py:3);[native];work (app.py:9);[gc] 7",
    f"thread (MainThread 7);{LOOP};handler (app.py:4);sleep (time.py:0);[blocked] 5",
    f"{LOOP};_run_once (asyncio/base_events.py:1922);select (selectors.py:468);[idle] 40",
    f"{LOOP};h (a:1:2);x (:5);a(b:1);f (a.py:-3);g (m.py:\u0663);k (m.py:\u00b2) 3",
    f"{LOOP};RequestHandler._execute (tornado/web.py:1);[pruned] 2",
    r"run_forever (C:\py\asyncio\base_events.py:607);h (C:\srv\aiohttp\web_app.py:5) 4",
    "run (uvloop/loop.py:1);Loop.run_forever (uvloop/__init__.py:82);cb (app.py:2) 6",
    "thread (pool 8);_worker (concurrent/futures/thread.py:83);[idle] 30",
    "[gil] 2",
]


def _profiles() -> dict[str, list[str]]:
    deep = list(folded_lines(2_000, seed=3))
    short = list(folded_lines(20_000, seed=4, depth=(1, 2), fanout=600, short=True))
    plain = [line.replace(";[idle]", "").replace(";[blocked]", "") for line in deep]
    return {
        "deep": deep + ODD,
        "short": short,
        "short and odd": short + ODD[-2:],
        "no leaves (estimated)": plain,
        "uvloop, no leaves": [line.replace(";[idle]", "") for line in ODD[6:8]],
        "odd": ODD,
    }


PROFILES = _profiles()


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("limit", [None, 64])
def test_analysis_gives_the_slow_ways_figures(
    name: str, limit: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if limit is not None:  # facts dropped and found again, many times over
        monkeypatch.setattr(threads, "Frames", partial(Frames, limit=limit))
    text = "\n".join(PROFILES[name]) + "\n"
    expected = oracle.analysis(oracle.parse(text))
    got = threads.analyze(parse_folded(text))
    assert got == expected
    assert stats_document([got]) == stats_document([expected])


def test_stats_of_large_files_gives_the_slow_ways_figures(tmp_path: Path) -> None:
    """The CLI, as a process, on 45,000 stacks of both shapes, as folded text and as the SVG
    render writes of it (which carries its stacks)."""
    lines = list(folded_lines(40_000, seed=5, depth=(1, 2), fanout=600, short=True))
    lines += list(folded_lines(5_000, seed=6)) + ODD
    folded = tmp_path / "large.folded"
    folded.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = stats_document([oracle.analysis(oracle.parse(folded.read_text()))])
    svg = tmp_path / "large.svg"
    drawn = sidecar("render", str(folded), "-o", str(svg))
    assert drawn.returncode == 0, drawn.stderr
    for path in (folded, svg):
        result = sidecar("stats", str(path), "--json", timeout=300)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == expected, path.name
    # the shares are of the loop threads' stacks (all through run_forever), not the others'
    loops = sum(int(line.rsplit(" ", 1)[1]) for line in lines if "run_forever (" in line)
    assert expected["targets"][0]["framework"] == "aiohttp"
    assert expected["targets"][0]["samples"] == loops


PIECES = ["a;b", "x (m.py:3)", " ", "  ", "\t", "\r\n", "\n", "\r", "\x0b", "\x85", "\u2028",
          "1", "0", "07", "1,000", "1_0", "9" * 17, "#c", "[idle]", ";", "\u00e9", "\u00b2",
          "\u0663", "\u3000", "\ufeff", "x"]  # fmt: skip


def _outcome(read: Callable[[], Profile]) -> tuple[object, ...]:
    try:
        got = read()
        return ("read", list(got.stacks.items()), got.marked)
    except (ProfileFormatError, SidecarError) as err:
        return ("refused", str(err))


def test_folded_text_read_in_pieces_reads_as_the_slow_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut every few bytes: lines across pieces, a UTF-8 sequence across a cut, CRLF, lines
    ended by other separators, counts in other digits, and bytes that are not UTF-8."""
    monkeypatch.setattr(profile_module, "_CHUNK", 7)
    monkeypatch.setattr(inputs, "_BLOCK", 5)
    rng = random.Random(7)
    path = tmp_path / "p.folded"
    read_folded = FORMATS["folded"].read
    for _ in range(1500):
        data = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 40))).encode()
        if rng.random() < 0.3:
            data = data.replace(b"\xc3\xa9", b"\xc3")  # a sequence cut short
        text = data.decode(errors="replace")
        expected = _outcome(partial(oracle.parse, text, "p"))
        assert _outcome(partial(read_folded, data, "p")) == expected, data
        assert _outcome(partial(parse_folded, text, "p")) == expected, data
        if inputs.sniff(data) == "folded":
            path.write_bytes(data)
            got = _outcome(partial(load_profile, str(path)))
            named = tuple(part.replace(str(path), "p") if isinstance(part, str) else part
                          for part in got)  # fmt: skip
            assert named == expected, data


def test_an_svgs_frames_are_checked_against_its_embedded_stacks_as_the_slow_way() -> None:
    """The width each drawn frame holds, by the stacks' call tree, as walking every stack's
    every prefix gives it: empty frames, [pruned] leaves, frames absent from the stacks."""
    rng = random.Random(8)
    parts = ["a", "b", "c", "", PRUNED_LEAF, "x;y"]
    for _ in range(3000):
        stacks = {
            ";".join(rng.choice(parts) for _ in range(rng.randint(1, 5))): rng.randint(0, 5)
            for _ in range(rng.randint(0, 8))
        }
        frames = {stack.removesuffix(PRUNED_LEAF).removesuffix(";") for stack in stacks}
        frames |= {";".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in "abc"}
        frames -= {""}
        assert svg_counts._through(stacks, frames) == oracle.through(stacks, frames), stacks


RUN = "run_forever (asyncio/base_events.py:607)"
EDGES = {
    # a stack again (its counts add up), CRLF, a thread's stacks before the loop's
    "again": f"w (x.py:1);[idle] 5\r\n{RUN};h (app.py:1) 3\r\n{RUN};h (app.py:1) 4\r\n"
    f"{RUN};[idle] 2\r\n",
    # counts of 0 keep no stack, [idle] among them: not marked
    "zeros": f"a;b 0\nx;[idle] 0\n{RUN};x (m.py:1);[blocked] 0\n{RUN};b (m.py:2) 3\n",
    # no leaves (estimated), bytes that are not UTF-8
    "unmarked": f"f (a.py:1)\xff;g 3\n{RUN};select (selectors.py:468) 7\n{RUN};h (a.py:2) 1\n",
    "a bad line": "a;b 1\nnot a line\nc 2\n",
    "comments only": "# nothing\n\n",
    "past the most": "a 5000000000000000\nb 5000000000000000\n",
}


@pytest.mark.parametrize("name", EDGES)
def test_stats_of_folded_text_analyzed_as_it_is_read(name: str, tmp_path: Path) -> None:
    """``stats`` of a folded file keeps no profile: what it prints is the profile's figures,
    or the error reading it gives, in one line."""
    path = tmp_path / "edge.folded"
    path.write_bytes(EDGES[name].encode("latin-1" if "\xff" in EDGES[name] else "utf-8"))
    result = sidecar("stats", str(path), "--json")
    try:
        expected = oracle.parse(path.read_bytes().decode(errors="replace"), str(path))
    except ProfileFormatError as err:
        assert result.returncode == 1 and result.stderr == f"sidecar: error: {err}\n"
        return
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == stats_document([oracle.analysis(expected)])
