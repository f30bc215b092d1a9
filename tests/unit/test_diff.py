"""Differential profiles: no change for equal inputs, the slowed handler on top, the CLI (a
real target's slowed handler: tests/live/test_diff_real_target.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar import _native
from sidecar.analyze.diff import (
    compare_shares,
    diff_profiles,
    function_of,
    normalize_frame,
    report,
    scaled,
)
from sidecar.errors import ProfileFormatError
from sidecar.formats.inputs import PARALLEL_BYTES, load_profile, load_profiles
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.svg import read_flamegraph, read_svg
from sidecar.profile import Profile, parse_folded
from sidecar.rules.frames import BLOCKED_LEAF, GC_FRAME, GIL_LEAF, IDLE_LEAF, parse_frame
from tests.support.flamegraph_pl import flamegraph_pl_svg
from tests.support.helpers import sidecar
from tests.support.shares_oracle import carriers, counted
from tests.unit.test_svg import STACKS

GOLDEN = Path(__file__).parent / "golden"


def _profile(stacks: dict[str, int]) -> Profile:
    profile = Profile()
    for stack, count in stacks.items():
        profile.add(stack, count)
    return profile


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, normalize=st.booleans())
def test_diff_of_a_profile_with_itself_shows_no_change(
    stacks: dict[str, int], normalize: bool
) -> None:
    a = _profile(stacks)
    diff = diff_profiles(a, a, normalize=normalize)
    assert diff.unchanged
    assert not diff.self_changes and not diff.total_changes
    assert diff.verdict.startswith("totals equal")
    for line in diff.lines:
        _, before, after = line.rsplit(" ", 2)
        assert before == after
    assert report(diff)[0] == "no frame changed its share of the samples"


# Frames as profilers write them: several lines of one function, state leaves (also where
# they are no leaf), the collector's frame, names that only look like a location, and the
# empty name.
_FRAMES = st.sampled_from(
    [
        "main (app.py:1)",
        "main (app.py:2)",
        "work (lib/w.py:10)",
        "work (lib/w.py:-3)",
        "work (other.py:10)",
        "f",
        "f (not a location)",
        "g ()",
        "h (x:y:3)",
        "",
        "é (ü.py:1)",
        IDLE_LEAF,
        BLOCKED_LEAF,
        GIL_LEAF,
        GC_FRAME,
        "select" + BLOCKED_LEAF,
        "wait" + GIL_LEAF,
    ]
)
_DIFF_STACKS = st.dictionaries(
    st.lists(_FRAMES, min_size=1, max_size=8).map(";".join),
    st.integers(min_value=1, max_value=10**6),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=_DIFF_STACKS, after=_DIFF_STACKS)
def test_native_counts_and_carriers_are_the_python_ones(
    before: dict[str, int], after: dict[str, int]
) -> None:
    a, b = _profile(before), _profile(after)
    for profile in (a, b):
        keys = {t: function_of(t) for t in _native.frame_names(profile.stacks)}
        assert set(keys) == {t for s in profile.stacks for t in s.split(";")}
    frames = list(dict.fromkeys(_native.frame_names(a.stacks) + _native.frame_names(b.stacks)))
    native_a, native_b, native_carriers = compare_shares(a, b, frames)
    python_a, python_b = counted(a), counted(b)
    for native, python in ((native_a, python_a), (native_b, python_b)):
        assert (native.self_, native.total, native.states) == (
            python.self_,
            python.total,
            python.states,
        )
    # Callers without a change are the same as absent ones.
    nothing = (0.0, "", 0.0, "")
    assert {k: v for k, v in native_carriers.items() if v != nothing} == {
        k: v for k, v in carriers(python_a, python_b).items() if v != nothing
    }


def test_a_loop_that_came_to_wait_for_the_gil_shows_in_the_states_line() -> None:
    """gil stacks lose their leaf as blocked ones do: the function that waited for the GIL
    gets no self time for it and [gil] is in no table; the states line says how the gil share
    moved. A [gc] frame on top of a busy stack takes its self time."""
    main, handler = "main (app.py:1)", "handler (app.py:5)"
    poll = f"{main};select (selectors.py:1);{IDLE_LEAF}"
    before = _profile({f"{main};{handler}": 60, poll: 40})
    after = _profile(
        {
            f"{main};{handler}": 30,
            f"{main};{handler};{GIL_LEAF}": 50,
            f"{main};{handler};{GC_FRAME}": 10,
            poll: 10,
        }
    )
    diff = diff_profiles(before, after)
    states = {c.frame: (c.before, c.after) for c in diff.state_changes}
    assert states == {
        "busy": (0.6, 0.4),
        "idle": (0.4, 0.1),
        "blocked": (0.0, 0.0),
        "gil": (0.0, 0.5),
        "cpu_wait": (0.0, 0.0),
    }
    self_ = {c.frame: c.delta for c in diff.self_changes}
    assert self_ == pytest.approx({"handler (app.py)": -0.3, GC_FRAME: 0.1})
    total = {c.frame: c.delta for c in diff.total_changes}
    assert GIL_LEAF not in total and total["handler (app.py)"] == pytest.approx(0.3)
    assert "gil 0.0% -> 50.0% (+50.0)" in report(diff)[-2]


def test_function_of_is_parse_frames_key() -> None:
    for text in [
        "main (app.py:1)",
        "f",
        "g ()",
        "h (x:y:3)",
        "x (a.py:١٢)",
        "n (:3)",
        "a\n (b.py:1)",
    ]:
        parsed = parse_frame(text)
        assert function_of(text) == (f"{parsed.name} ({parsed.file})" if parsed.file else text)


def test_totals_beyond_exact_floats_are_refused_in_one_line(tmp_path: Path) -> None:
    big = _profile({"main;a": 2**60, "main;b": 1})
    other = _profile({"main;a": 1, "main;b": 2})
    with pytest.raises(ProfileFormatError, match=r"^before: 1,152,921,504,606,846,977 samples"):
        compare_shares(big, other, ["main", "a", "b"])
    before, after = tmp_path / "before.folded", tmp_path / "after.folded"
    before.write_text("main;a 3\n")
    after.write_text(f"main;a {2**70}\n")
    result = sidecar("diff", str(before), str(after), "-o", str(tmp_path / "diff.svg"))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    # refused as it is read, by the bound every reader keeps (``profile.MAX_SAMPLES``)
    said = f"{after}: line 1: a count of 1,180,591,620,717,411,303,424 is past the most"
    assert len(lines) == 1 and said in lines[0], lines
    assert not (tmp_path / "diff.svg").exists()
    # just below the bound, the comparison is made
    edge = _profile({"main;a": 2**53 - 2, "main;b": 1})
    assert compare_shares(edge, other, ["main", "a", "b"])[0].self_["b"] == 1 / (2**53 - 1)


def test_diff_of_the_same_profile_read_as_svg_and_as_folded() -> None:
    svg = GOLDEN / "py-spy-aiohttp.svg"
    from_svg = load_profile(str(svg))
    folded = parse_folded(from_svg.to_folded())
    rerendered = read_svg(render_svg(from_svg.folded_lines(), RenderOptions(min_width=0)).encode())
    for other in (folded, rerendered):
        assert diff_profiles(from_svg, other).unchanged


def _slowed(stacks: dict[str, int], frame: str, factor: int) -> dict[str, int]:
    return {s: c * factor if frame in s.split(";") else c for s, c in stacks.items()}


BASE = {
    "main;loop;select;" + IDLE_LEAF: 700,
    "main;loop;run;handler_a;parse": 60,
    "main;loop;run;handler_a": 20,
    "main;loop;run;handler_b;query": 80,
    "main;loop;run;handler_b": 30,
    "main;loop;run;handler_c": 20,
    "main;loop;run;handler_c;render;escape": 50,
    "main;loop;run;handler_c;render": 40,
    "main;loop;run": 50,
}


@pytest.mark.parametrize("slowed", ["handler_a", "handler_b", "handler_c"])
def test_a_handler_made_three_times_slower_is_the_top_change(slowed: str) -> None:
    before = _profile(BASE)
    after = _profile(_slowed(BASE, slowed, 3))
    diff = diff_profiles(before, after)
    top = diff.total_changes[0]
    assert top.frame == slowed, report(diff)
    assert top.delta > 0
    # Its callers only pass the change on: they are not listed above it.
    assert "run" not in [c.frame for c in diff.total_changes[:1]]
    assert diff.self_changes[0].delta > 0
    assert diff.self_changes[0].frame in {"parse", "handler_a", "query", "escape", "render"}
    # The graph is scaled when asked: equal totals.
    normalized = diff_profiles(before, after, normalize=True)
    olds = sum(int(line.rsplit(" ", 2)[1]) for line in normalized.lines)
    news = sum(int(line.rsplit(" ", 2)[2]) for line in normalized.lines)
    assert olds == news == after.total
    assert "--normalize" in normalized.verdict


def test_a_change_passed_whole_to_one_callee_is_shown_at_the_callee() -> None:
    # wrapper does nothing but call work: the change is reported where the time went.
    others = {"main;other_a": 45, "main;other_b": 45}
    before = _profile({"main;wrapper;work": 10, **others})
    after = _profile({"main;wrapper;work": 30, **others})
    frames = [c.frame for c in diff_profiles(before, after).total_changes]
    assert frames[0] == "work"
    assert "wrapper" not in frames and "main" not in frames


def test_scaled_counts_add_up_exactly() -> None:
    counts = {"a": 1, "b": 1, "c": 1}
    assert sum(scaled(counts, 10).values()) == 10
    assert scaled({"a": 2, "b": 6}, 4) == {"a": 1, "b": 3}


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("thread (MainThread 139872234567424)", "thread (MainThread)"),
        ("thread (ThreadPoolExecutor-0_3 140012)", "thread (ThreadPoolExecutor)"),
        ("thread (Thread-12 (worker) 77777)", "thread (Thread (worker))"),
        ("thread (0x7F3B2C1D0740)", "thread"),
        ('process 4242:"python -m app"', 'process:"python -m app"'),
        ("<lambda> at 0x7f3b2c1d0740 (app.py:3)", "<lambda> at 0x? (app.py:3)"),
        ("handler (app.py:12)", "handler (app.py:12)"),
        (IDLE_LEAF, IDLE_LEAF),
    ],
)
def test_run_specific_names_are_normalized(raw: str, normal: str) -> None:
    assert normalize_frame(raw) == normal


def test_thread_ids_do_not_make_a_change() -> None:
    before = _profile({"thread (MainThread 1111111);main;work": 10})
    after = _profile({"thread (MainThread 2222222);main;work": 10})
    diff = diff_profiles(before, after)
    assert diff.unchanged
    assert diff.lines == ["thread (MainThread);main;work 10 10"]


def test_unequal_totals_verdict() -> None:
    before = _profile({"a;b": 100})
    after = _profile({"a;b": 300})
    diff = diff_profiles(before, after)
    assert diff.unchanged  # same shares
    assert "totals differ" in diff.verdict and "3x" in diff.verdict
    assert "about equal" in diff_profiles(before, _profile({"a;b": 102})).verdict


# --- the command ------------------------------------------------------------------------------


def test_cli_diff_svg_against_folded(tmp_path: Path) -> None:
    before = tmp_path / "before.svg"
    before.write_text(flamegraph_pl_svg(BASE, inverted=True, seed=1))
    after = tmp_path / "after.txt"  # folded text, whatever the name says
    after.write_text(_profile(_slowed(BASE, "handler_b", 3)).to_folded())
    out, folded = tmp_path / "d.svg", tmp_path / "d.folded"
    result = sidecar("diff", str(before), str(after), "-o", str(out), "--folded", str(folded))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1].startswith("totals differ")
    header = lines.index("largest changes in total share (time in the frame and what it calls):")
    assert re.match(
        r"\s+\d+\.\d\d%\s+\d+\.\d\d%\s+\+\d+\.\d\d\s+handler_b( <- .*)?$", lines[header + 2]
    )
    # The differential SVG is a flamegraph of the after side, with changes in its titles.
    graph = read_flamegraph(out.read_bytes())
    assert graph.differential
    assert graph.total == sum(_slowed(BASE, "handler_b", 3).values())
    assert re.search(rb"handler_b \(330 samples, [\d.]+%; [+-][\d.]+%\)", out.read_bytes())
    # The folded diff has two counts per line.
    split = (line.rsplit(" ", 2) for line in folded.read_text().splitlines())
    rows = {stack: (int(b), int(a)) for stack, b, a in split}
    assert rows["main;loop;run;handler_b;query"] == (80, 240)
    assert rows["main;loop;run"] == (50, 50)


def test_cli_normalize_and_default_output(tmp_path: Path) -> None:
    before = tmp_path / "before.folded"
    before.write_text("main;a 10\nmain;b 10\n")
    after = tmp_path / "after.folded"
    after.write_text("main;a 30\nmain;b 10\n")
    folded = tmp_path / "n.folded"
    result = sidecar("diff", str(before), str(after), "--normalize", "--folded", str(folded))
    assert result.returncode == 0, result.stderr
    assert folded.read_text() == "main;a 20 30\nmain;b 20 10\n"
    assert not (tmp_path / "after.diff.svg").exists()  # only --folded was asked for
    result = sidecar("diff", str(before), str(after))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "after.diff.svg").exists()
    same = sidecar("diff", str(before), str(before), "-o", str(tmp_path / "same.svg"))
    assert same.returncode == 0
    assert "no frame changed its share of the samples" in same.stdout
    assert same.stdout.splitlines()[-1] == "totals equal: 20 samples each"


@pytest.mark.parametrize(
    "args",
    [
        ("only-one.svg",),
        ("a", "b", "--top", "0"),
        ("a", "b", "--min-width", "-1"),
        ("-", "-"),
        ("a", "b", "-o", "-", "--folded", "-"),
    ],
)
def test_cli_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    result = sidecar("diff", *args)
    assert result.returncode == 2, result.stderr


def test_cli_folded_to_stdout_keeps_the_table_apart(tmp_path: Path) -> None:
    before = tmp_path / "before.folded"
    before.write_text("main;a 10\nmain;b 10\n")
    result = sidecar("diff", str(before), str(before), "--folded", "-")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "main;a 10 10\nmain;b 10 10\n"
    assert "totals equal: 20 samples each" in result.stderr


def test_cli_missing_file_exits_1(tmp_path: Path) -> None:
    good = tmp_path / "good.folded"
    good.write_text("main 1\n")
    result = sidecar("diff", str(tmp_path / "nope.svg"), str(good))
    assert result.returncode == 1
    assert result.stderr.startswith("sidecar: error: cannot read")
    assert len(result.stderr.splitlines()) == 1


# --- a real target, with its handler made 3x slower ------------------------------------------


def test_two_large_inferno_svgs_are_read_at_once_with_the_same_result(tmp_path: Path) -> None:
    def stacks_of(leaf: str) -> dict[str, int]:
        return {
            ";".join(["main (m.py:1)", *(f"f{i}_{d} (m{d}.py:{i % 13})" for d in range(20)), leaf])
            + f"{i}": 1 + i % 9
            for i in range(2500)
        }

    paths, both = [], []
    for name in ("big", "other"):
        stacks = stacks_of(f"{name} (n.py:1)")
        path = tmp_path / f"{name}.svg"
        path.write_text(
            render_svg([f"{s} {c}" for s, c in stacks.items()], RenderOptions(min_width=0))
        )
        paths.append(str(path))
        both.append(stacks)
    assert sum(Path(p).stat().st_size for p in paths) > PARALLEL_BYTES
    first, second = load_profiles(*paths)
    assert first.stacks == both[0] == load_profile(paths[0]).stacks
    assert second.stacks == both[1]
    # An error in either input reaches the caller as it is, whichever is read on the thread.
    bad = tmp_path / "bad.svg"
    bad.write_text(BAD_SVG)
    with pytest.raises(ProfileFormatError, match=r"bad\.svg: refused"):
        load_profiles(str(bad), paths[0])
    with pytest.raises(ProfileFormatError, match=r"bad\.svg: refused"):
        load_profiles(paths[0], str(bad))


BAD_SVG = '<!DOCTYPE svg [<!ENTITY a "b">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>'
