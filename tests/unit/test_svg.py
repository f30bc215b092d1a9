"""The flamegraph SVG reader: round trips, golden files, py-spy's SVGs, hostile inputs (one of a
live target: tests/live/test_svg_py_spy.py)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar import _native
from sidecar.analyze.diff import diff_profiles
from sidecar.errors import ProfileFormatError
from sidecar.formats.inputs import load_profile, parse_profile, sniff
from sidecar.formats.render import RenderOptions, render_svg
from sidecar.formats.svg import (
    MAX_DEPTH,
    PRUNED_FRAME,
    SEMICOLON_STANDIN,
    read_flamegraph,
    read_svg,
    to_profile,
)
from sidecar.profile import Profile, parse_folded
from sidecar.rules.frames import BLOCKED_LEAF, IDLE_LEAF
from tests.support.flamegraph_pl import flamegraph_pl_svg
from tests.support.helpers import PYTHON, ROOT, LoadDriver, Spawner, sidecar
from tests.support.py_spy_svg import PY_SPY, check_py_spy_svg
from tests.support.svg_oracle import OracleRefused, scan

GOLDEN = Path(__file__).parent / "golden"
BLESS = os.environ.get("SIDECAR_BLESS") == "1"

# --- strategies -------------------------------------------------------------------------------

# Frame names as profilers write them, and worse: spaces, parentheses, XML's special characters,
# non-ASCII. Not ';' (the folded separator), no control characters, no surrounding spaces, no
# trailing number (a folded line's count) and no inferno annotation suffix like "_[k]".
_ALPHABET = st.sampled_from(list("abcxyz_.:/<>&\"'()[] -=é中λ0123456789"))


def _good_name(name: str) -> bool:
    return (
        bool(name)
        and name == name.strip()
        and not name[-1].isdigit()
        and name[-1] != "."
        and re.search(r"_\[[kwij]\]$", name) is None
        and name != "all"
    )


NAMES = st.text(_ALPHABET, min_size=1, max_size=12).filter(_good_name)
STACKS = st.dictionaries(
    st.lists(NAMES, min_size=1, max_size=7).map(";".join),
    st.integers(min_value=1, max_value=5000),
    min_size=1,
    max_size=30,
)


def _render(stacks: dict[str, int], **options: object) -> bytes:
    lines = [f"{s} {c}" for s, c in stacks.items()]
    return render_svg(lines, RenderOptions(**options)).encode()  # type: ignore[arg-type]


# --- round trips --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, inverted=st.booleans())
def test_inferno_round_trip_is_exact(stacks: dict[str, int], inverted: bool) -> None:
    profile = read_svg(_render(stacks, min_width=0, inverted=inverted))
    assert profile.stacks == stacks


# --- the native reader's folding against the Python side's, its reading against expat's ---------


def _native_read(svg: bytes) -> Profile | None:
    """The profile read_svg makes of the native reader's folded stacks, None if it did not fold
    them (another layout, an inconsistent graph, or an error)."""
    from sidecar.formats.svg import _inferno_profile

    try:
        read = _native.read_svg(svg, max_depth=MAX_DEPTH)
    except ValueError:
        return None
    folded = read["folded"]
    return None if folded is None else _inferno_profile(folded)


def _same_scan(svg: bytes) -> None:
    """The native reader reads what expat (the oracle) reads, or both refuse."""
    try:
        oracle = scan(svg, MAX_DEPTH)
    except OracleRefused:
        with pytest.raises(ValueError):
            _native.read_svg(svg, max_depth=MAX_DEPTH, fold=False)
        return
    native = _native.read_svg(svg, max_depth=MAX_DEPTH, fold=False)
    assert native["root"] == oracle.root
    assert native["frames"] == oracle.frames
    assert native["total_samples"] == oracle.total_samples
    assert native["script"] == oracle.script
    assert native["embedded"] == oracle.embedded


def _python_read(svg: bytes) -> Profile:
    return to_profile(read_flamegraph(svg))


def _same_profile(native: Profile, python: Profile) -> None:
    assert list(native.stacks.items()) == list(python.stacks.items())  # same order too
    assert native.notes == python.notes
    assert native.marked == python.marked


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stacks=STACKS,
    inverted=st.booleans(),
    min_width=st.sampled_from([0, 0.1, 5.0]),
    factor=st.sampled_from([1.0, 0.1, 3.0]),
)
def test_native_and_python_readers_agree(
    stacks: dict[str, int], inverted: bool, min_width: float, factor: float
) -> None:
    lines = sorted(f"{s} {c}" for s, c in stacks.items())
    svg = _native.render_svg(lines, min_width=min_width, inverted=inverted, factor=factor)
    native = _native_read(svg.encode())
    assert native is not None  # inferno's own SVGs are read natively
    _same_profile(native, _python_read(svg.encode()))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(before=STACKS, after=STACKS, inverted=st.booleans())
def test_native_and_python_readers_agree_on_differential_graphs(
    before: dict[str, int], after: dict[str, int], inverted: bool
) -> None:
    lines = diff_profiles(Profile(stacks=before), Profile(stacks=after)).lines
    for min_width in (0.1, 0):
        svg = _native.render_svg(lines, min_width=min_width, inverted=inverted).encode()
        native = _native_read(svg)
        try:
            python = _python_read(svg)
        except ProfileFormatError:
            # Zero-width frames (gone in AFTER) drawn with min width 0 can sit beside their
            # parent; the Python reader refuses that, and so must read_svg.
            assert min_width == 0 and native is None
            continue
        assert native is not None
        _same_profile(native, python)
        assert any("differential" in note for note in native.notes)


# Edits of an inferno SVG that XML, expat or inferno's template care about.
_EDITS = [
    '<!DOCTYPE svg [<!ENTITY a "b">]>',
    "&a;",
    "&mp;",
    "&#0;",
    "&#x1F;",
    "&#65;",
    "&amp;",
    "&lt",
    "<?pi x?>",
    "<!-- a -- b -->",
    "<!-- ok -->",
    "]]>",
    "<![CDATA[x]]>",
    "<g>",
    "</g>",
    "<g/>",
    "<title>x (1 samples, 1%)</title>",
    '<rect x="1" y="1" width="1" height="1" fg:x="0" fg:w="1"/>',
    "\r\n",
    "\r",
    " ",
    "\t",
    '"',
    "'",
    "<",
    ">",
    "&",
    "=",
    "/",
    ";",
    "(",
    ")",
    ",",
    "%",
    "1",
    '<a b="1" b="2"/>',
    '<a b="1"c="2"/>',
    "<1a/>",
    "<svg>",
    "</svg>",
    'id="frames" ',
    "\x01",
    "\x00",
    "\ufffe",
    "é",
    "<!DOCTYPE svg>",
    '<?xml version="1.0"?>',
]


def test_an_xml_declaration_expat_takes_and_the_native_reader_refuses() -> None:
    """The one declaration the two readers differ on: expat takes any version made of name
    characters; the native reader reads version 1.x only and says so in one line."""
    svg = b'<?xml version="1.0no"?><svg xmlns="http://www.w3.org/2000/svg"></svg>'
    assert scan(svg, MAX_DEPTH).root == "svg"
    with pytest.raises(ValueError, match=r"the XML declaration is not version 1\.x in UTF-8"):
        _native.read_svg(svg, max_depth=MAX_DEPTH, fold=False)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stacks=STACKS,
    inverted=st.booleans(),
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.one_of(
                st.sampled_from(_EDITS).map(lambda e: e.encode().decode("unicode_escape")),
                st.integers(1, 40),  # or cut this many bytes
            ),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_native_reader_reads_edited_svgs_as_expat_does(
    stacks: dict[str, int], inverted: bool, edits: list[tuple[float, str | int]]
) -> None:
    svg = _render(stacks, min_width=0, inverted=inverted)
    for where, edit in edits:
        at = int(where * len(svg))
        if isinstance(edit, int):
            svg = svg[:at] + svg[at + edit :]
        else:
            svg = svg[:at] + edit.encode("utf-8", "surrogatepass") + svg[at:]
    try:
        _same_scan(svg)
    except ValueError as err:
        # Stricter than expat on two points: under inferno's DOCTYPE (an external subset, never
        # read) expat skips a reference to an undeclared entity, and it takes an XML declaration
        # whose version is any run of name characters (an edit that cuts `version="1.0"
        # standalone="no"` to `version="1.0no"`); the native reader refuses both.
        assert any(
            refusal in str(err)
            for refusal in (
                "entity declarations are not accepted",
                "the XML declaration is not version 1.x in UTF-8",
            )
        )
        assert re.search(r"&(?!lt;|gt;|amp;|quot;|apos;|#)[^\s&;<>]+;", svg.decode()), err
        return
    native = _native_read(svg)
    try:
        python = _python_read(svg)
    except ProfileFormatError as err:
        assert native is None, err
        with pytest.raises(ProfileFormatError, match=re.escape(str(err))):
            read_svg(svg)
        return
    if native is not None:
        _same_profile(native, python)
    _same_profile(read_svg(svg), python)


def test_carriage_returns_read_as_expat_reads_them_and_undeclared_entities_refused() -> None:
    for edit, read in (("\r\n", "\n"), ("\r", "\n"), ("\r\n\r", "\n\n")):
        svg = _render({"a;b": 3, "a;c": 2}, min_width=0).replace(
            b"<title>b (", f"<title>{edit}b (".encode()
        )
        _same_scan(svg)
        assert read_svg(svg).stacks == {f"a;{read}b": 3, "a;c": 2}
    # inferno's DOCTYPE names an external subset: expat then skips undeclared entities.
    svg = _render({"a;b": 3}, min_width=0).replace(b"<title>b (", b"<title>&mp;b (")
    with pytest.raises(
        ProfileFormatError, match=r"^input: refused at line \d+, column \d+: .*&mp;"
    ):
        read_svg(svg)


def test_native_reader_folds_only_inferno_frames_and_refuses_hostile_input(
    tmp_path: Path,
) -> None:
    stacks = parse_folded(GOLDEN_INPUT).stacks
    pl = _native.read_svg(flamegraph_pl_svg(stacks, minwidth=0, seed=7).encode(), max_depth=99)
    assert pl["folded"] is None and pl["frames"]
    for name in HOSTILE:
        data = _hostile(tmp_path, name).read_bytes()
        if len(data) > 1024 * 1024:
            continue
        if name in ("not-svg.html", "plain-svg.svg"):  # well-formed, without frames
            assert _native.read_svg(data, max_depth=MAX_DEPTH)["frames"] == []
        else:
            with pytest.raises(ValueError):
                _native.read_svg(data, max_depth=MAX_DEPTH)
    deep = "<svg>" + "<svg>" * MAX_DEPTH + "</svg>" * MAX_DEPTH + "</svg>"
    with pytest.raises(ValueError, match=f"nest deeper than {MAX_DEPTH}"):
        _native.read_svg(deep.encode(), max_depth=MAX_DEPTH)
    svg = _render(stacks, min_width=0)
    assert _native.read_svg(svg, max_depth=MAX_DEPTH)["folded"] is not None
    with pytest.raises(ValueError, match=r"nest deeper than 3 \(at line \d+, column \d+\)"):
        _native.read_svg(svg, max_depth=3)


def test_errors_stay_one_short_line_whatever_the_document_puts_in_them() -> None:
    for svg in (b"<svg><style></style&\n?></svg>", b"<svg><" + b"a" * 5000 + b"></b></svg>"):
        with pytest.raises(ProfileFormatError) as info:
            read_svg(svg)
        assert "\n" not in str(info.value) and len(str(info.value)) < 400, info.value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, inverted=st.booleans(), min_width=st.sampled_from([0.1, 1.0, 5.0]))
def test_inferno_round_trip_with_pruning_keeps_the_total(
    stacks: dict[str, int], inverted: bool, min_width: float
) -> None:
    profile = read_svg(_render(stacks, min_width=min_width, inverted=inverted))
    assert profile.total == sum(stacks.values())
    # Whatever survives is a prefix of a real stack, and no stack grew beyond what it covers.
    for stack, count in profile.stacks.items():
        if stack == PRUNED_FRAME:
            continue
        # a [pruned] leaf holds callees of its parent too narrow to draw
        parent = stack.removesuffix(f";{PRUNED_FRAME}")
        callees = parent != stack
        covered = sum(
            c
            for s, c in stacks.items()
            if (s == parent and not callees) or s.startswith(parent + ";")
        )
        assert 0 < count <= covered


#: flamegraph.pl writes x and width with one decimal (and by default omits frames under 0.1 px),
#: so a frame narrower than that has no position to recover: the geometry round trip is for
#: frames at least ~1.5 px wide (200 of at most 30 x 5000 samples across 1180 px).
RESOLVABLE_STACKS = st.dictionaries(
    st.lists(NAMES, min_size=1, max_size=7).map(";".join),
    st.integers(min_value=200, max_value=5000),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=RESOLVABLE_STACKS, inverted=st.booleans(), seed=st.integers(0, 1000))
def test_flamegraph_pl_geometry_round_trip(
    stacks: dict[str, int], inverted: bool, seed: int
) -> None:
    svg = flamegraph_pl_svg(stacks, inverted=inverted, minwidth=0, seed=seed, jitter=0.3)
    graph = read_flamegraph(svg.encode())
    assert not graph.exact
    assert graph.inverted == inverted
    assert to_profile(graph).stacks == stacks


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, inverted=st.booleans())
def test_flamegraph_pl_with_pruning_keeps_the_total(stacks: dict[str, int], inverted: bool) -> None:
    svg = flamegraph_pl_svg(stacks, inverted=inverted, minwidth=20)
    assert read_svg(svg.encode()).total == sum(stacks.values())


def test_pruned_frames_read_as_no_state_where_their_width_shows_and_are_noted() -> None:
    # inferno lays out main's own samples first, then its callees in name order: tiny's width
    # lies after big's start, so it is known to be a callee too narrow to draw; a_tiny's lies
    # before it, where it cannot be told from main's own time
    stacks = {"main;big": 10_000, "main;tiny": 3, "main;a_tiny": 4, "tiny_root": 2}
    profile = read_svg(_render(stacks, min_width=0.1))
    assert profile.stacks == {
        "main;big": 10_000,
        f"main;{PRUNED_FRAME}": 3,
        "main": 4,
        PRUNED_FRAME: 2,
    }
    assert any("minimum width" in note and "5 samples" in note for note in profile.notes)
    exact = read_svg(_render(stacks, min_width=0))
    assert exact.stacks == stacks
    assert not any("minimum width" in note for note in exact.notes)


def test_factor_scaled_titles() -> None:
    # Counts scaled up by 10 to keep a decimal, shown scaled back by --factor 0.1.
    stacks = {"main;a": 234, "main;b": 1_000_000}
    inferno = read_flamegraph(_render_factor(stacks, 0.1))
    assert inferno.factor == pytest.approx(0.1, rel=1e-4)
    assert to_profile(inferno).stacks == stacks
    assert any("--factor" in note for note in to_profile(inferno).notes)
    pl = read_svg(flamegraph_pl_svg(stacks, factor=0.1, minwidth=0).encode())
    assert pl.stacks == {"main;a": 23, "main;b": 100_000}


def _render_factor(stacks: dict[str, int], factor: float) -> bytes:
    from sidecar._native import render_svg as native_render

    lines = sorted(f"{s} {c}" for s, c in stacks.items())
    return native_render(lines, min_width=0, factor=factor).encode()


def test_names_with_spaces_parentheses_escapes_and_sidecar_leaves() -> None:
    stacks = {
        '<module> (app.py:1);handle (a b (c).py:12);x < y & "z" (q.py:3)': 1_234_567,
        f"<module> (app.py:1);select (selectors.py:468);{IDLE_LEAF}": 4_000,
        f"<module> (app.py:1);sleep (time.py:1);{BLOCKED_LEAF}": 7,
    }
    for inverted in (False, True):
        svg = _render(stacks, min_width=0, inverted=inverted)
        assert b"1,234,567" in svg  # the titles carry thousands separators
        profile = read_svg(svg)
        assert profile.stacks == stacks
        assert profile.marked
        pl = read_svg(flamegraph_pl_svg(stacks, inverted=inverted, minwidth=0).encode())
        assert pl.stacks == stacks


def test_semicolons_in_names_are_kept_visible() -> None:
    svg = flamegraph_pl_svg({"main;f": 5}, minwidth=0).replace(
        "<title>f (", "<title>Vec&lt;[u8; 8]&gt; ("
    )
    profile = read_svg(svg.encode())
    assert profile.stacks == {f"main;Vec<[u8{SEMICOLON_STANDIN} 8]>": 5}
    assert any("';'" in note for note in profile.notes)


def test_sniffing_is_by_content() -> None:
    assert sniff(b"<?xml version='1.0'?><svg/>") == "svg"
    assert sniff(b"\xef\xbb\xbf  <svg>") == "svg"
    assert sniff(b"<module> (app.py:1);main (app.py:9) 12\n") == "folded"
    assert sniff(b"main;f 3\n") == "folded"
    assert sniff(b"  \n") == "empty"
    assert sniff(b"\x89PNG\r\n\x1a\n\0\0") == "binary"
    folded = parse_profile(b"<module> (app.py:1);main (app.py:9) 12\n")
    assert folded.stacks == {"<module> (app.py:1);main (app.py:9)": 12}


# --- golden files ------------------------------------------------------------------------------

GOLDEN_INPUT = (
    "<module> (app.py:1);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1922);"
    f"select (selectors.py:468);{IDLE_LEAF} 812\n"
    "<module> (app.py:1);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1936);"
    "_run (asyncio/events.py:84);handler (app.py:20);classify (app.py:9) 1234\n"
    "<module> (app.py:1);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1936);"
    f"_run (asyncio/events.py:84);handler (app.py:21);sleep (time.py:0);{BLOCKED_LEAF} 97\n"
    "<module> (app.py:1);run (asyncio/runners.py:190);_run_once (asyncio/base_events.py:1936);"
    '_run (asyncio/events.py:84);x < y & "quoted" (weird (name).py:3) 2\n'
)


def _golden_svgs() -> dict[str, bytes]:
    stacks = parse_folded(GOLDEN_INPUT).stacks
    return {
        "inferno.svg": _render(stacks, min_width=0, title="golden"),
        "inferno-inverted.svg": _render(stacks, min_width=0, inverted=True, title="golden"),
        "inferno-pruned.svg": _render(stacks, min_width=0.1, title="golden"),
        "flamegraph-pl.svg": flamegraph_pl_svg(stacks, minwidth=0, seed=7).encode(),
        "flamegraph-pl-inverted.svg": flamegraph_pl_svg(
            stacks, inverted=True, minwidth=0, seed=8
        ).encode(),
    }


def _check_golden(svg: Path) -> None:
    expected = svg.with_suffix(".folded")
    profile = load_profile(str(svg))
    text = profile.to_folded() + "".join(f"# note: {n}\n" for n in profile.notes)
    if BLESS:
        expected.write_text(text)
    assert expected.exists(), f"{expected} missing: run with SIDECAR_BLESS=1"
    assert text == expected.read_text()


@pytest.mark.parametrize("name", sorted(_golden_svgs()))
def test_golden_generated_svgs(name: str) -> None:
    svg = GOLDEN / name
    if BLESS:
        GOLDEN.mkdir(exist_ok=True)
        svg.write_bytes(_golden_svgs()[name])
    _check_golden(svg)
    if not name.endswith("pruned.svg"):
        assert load_profile(str(svg)).stacks == parse_folded(GOLDEN_INPUT).stacks


def test_golden_py_spy_svg() -> None:
    """A py-spy SVG of the aiohttp demo under load (re-record with SIDECAR_BLESS=1)."""
    svg = GOLDEN / "py-spy-aiohttp.svg"
    if BLESS:
        _record_py_spy(svg)
    check_py_spy_svg(svg)
    _check_golden(svg)


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.svg")))
def test_native_reader_and_expat_agree_on_golden_svgs(name: str) -> None:
    svg = (GOLDEN / name).read_bytes()
    _same_scan(svg)
    assert scan(svg, MAX_DEPTH).frames  # a flamegraph, read by both
    # The native reader's folding of inferno's frames agrees with the Python side's.
    native = _native_read(svg)
    assert (native is not None) == (not name.startswith("flamegraph-pl"))
    if native is not None:
        _same_profile(native, _python_read(svg))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stacks=STACKS, inverted=st.booleans(), minwidth=st.sampled_from([0, 0.1, 20]))
def test_native_reader_and_expat_agree_on_flamegraph_pl_svgs(
    stacks: dict[str, int], inverted: bool, minwidth: float
) -> None:
    _same_scan(flamegraph_pl_svg(stacks, inverted=inverted, minwidth=minwidth).encode())


# --- py-spy's real SVGs ------------------------------------------------------------------------


def _record_py_spy(out: Path, duration: int = 3) -> None:
    spawn, load = Spawner(), LoadDriver()
    try:
        target = spawn.target("aiohttp_app")
        load.start(target.url + "/cpu?repeat=20", duration + 2)
        load.start(target.url + "/sleep", duration + 2)
        result = subprocess.run(
            [
                *(str(PY_SPY), "record", "--pid", str(target.pid), "--duration", str(duration)),
                *("--rate", "50", "-o", str(out), "--nonblocking"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
    finally:
        load.close()
        spawn.close()


# --- hostile inputs ----------------------------------------------------------------------------

BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">\n'
        for i in range(1, 10)
    )
    + ']>\n<svg xmlns="http://www.w3.org/2000/svg"><g><title>&lol9; (1 samples, 100%)</title>'
    '<rect x="0" y="0" width="100" height="15"/></g></svg>\n'
)
EXTERNAL_ENTITY = (
    '<?xml version="1.0"?>\n<!DOCTYPE svg [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
    '<svg xmlns="http://www.w3.org/2000/svg"><g><title>&xxe; (1 samples, 100%)</title>'
    '<rect x="0" y="0" width="100" height="15"/></g></svg>\n'
)
EXTERNAL_DTD_PARAM = (
    '<?xml version="1.0"?>\n<!DOCTYPE svg [<!ENTITY % ext SYSTEM "http://127.0.0.1:9/x.dtd"> '
    "%ext;]>\n<svg/>\n"
)


def _hostile(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    if name == "laughs.svg":
        path.write_text(BILLION_LAUGHS)
    elif name == "xxe.svg":
        path.write_text(EXTERNAL_ENTITY)
    elif name == "param.svg":
        path.write_text(EXTERNAL_DTD_PARAM)
    elif name == "deep.svg":
        depth = 100_000
        path.write_text("<svg>" + "<g>" * depth + "</g>" * depth + "</svg>")
    elif name == "huge.svg":
        with open(path, "wb") as handle:  # sparse: 200 MB on paper, a few bytes on disk
            handle.write(b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg">')
            handle.seek(200 * 1024 * 1024 - 7)
            handle.write(b"</svg>\n")
    elif name == "not-svg.html":
        path.write_text("<html><body><p>hello</p></body></html>\n")
    elif name == "plain-svg.svg":
        path.write_text('<svg xmlns="http://www.w3.org/2000/svg"><circle r="4"/></svg>\n')
    elif name == "broken.svg":
        path.write_text('<svg xmlns="http://www.w3.org/2000/svg"><g><title>x</g></svg>\n')
    elif name == "image.png":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(64))
    elif name == "empty.svg":
        path.write_bytes(b"")
    else:
        raise AssertionError(name)
    return path


HOSTILE = {
    "laughs.svg": "entity declarations are not accepted",
    "xxe.svg": "entity declarations are not accepted",
    "param.svg": "entity declarations are not accepted",
    "deep.svg": "nest deeper than",
    "huge.svg": "limit",
    "not-svg.html": "not an SVG",
    "plain-svg.svg": "not a flamegraph",
    "broken.svg": "not well-formed",
    "image.png": "binary data",
    "empty.svg": "empty",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    bad = _hostile(tmp_path, name)
    with pytest.raises(ProfileFormatError, match=HOSTILE[name]):
        load_profile(str(bad))
    good = tmp_path / "good.folded"
    good.write_text("main;f 3\n")
    for args in ((str(bad), str(good)), (str(good), str(bad))):
        result = sidecar("diff", *args, "-o", str(tmp_path / "d.svg"), timeout=60)
        assert result.returncode == 1, result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("sidecar: error: ") and HOSTILE[name] in lines[0]
        assert str(bad) in lines[0]
        assert not (tmp_path / "d.svg").exists()


_READ_PROBE = """
import sys
from sidecar.cli import main
code = main(sys.argv[1:])
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print(io["rchar"])
sys.exit(code)
"""


def test_huge_file_is_refused_by_its_size_before_reading(tmp_path: Path) -> None:
    bad = _hostile(tmp_path, "huge.svg")
    good = tmp_path / "good.folded"
    good.write_text("main;f 3\n")
    result = subprocess.run(
        [PYTHON, "-c", _READ_PROBE, "diff", str(bad), str(good), "-o", str(tmp_path / "d.svg")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "200 MB is above the 128 MB limit" in result.stderr
    # The whole process read far less than the file: it was refused by its size.
    assert int(result.stdout.strip()) < 20 * 1024 * 1024
