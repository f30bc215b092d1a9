"""What a profile says about its event loop: shares, stack depth, layers, hot and blocking spots.

Per target (one Profile, plus what discovery knows about the process) and aggregated per
framework, over the processes that serve requests: a pre-fork master (its loop serves none)
and a process whose threads run no event loop count in no framework's shares (``serves``):

- busy / idle / blocked / gil / cpu_wait shares of the event-loop thread(s)
  (``classify.state_counts``),
  who held the GIL while the loop waited for it, and the share of garbage collection;
- stack depth of busy loop samples: Python frames per sample (mean, p50, p95, max);
- where busy time goes by layer: the framework (aiohttp, tornado and their helpers), the event
  loop (asyncio, uvloop, selectors) or the application. Standard-library frames belong to
  whoever called them;
- the top functions by self and by total time of busy loop samples;
- the top blocking call sites: the frame right below the ``[blocked]`` leaf.

Profiles without ``[idle]``/``[blocked]``/``[gil]`` leaves (plain py-spy or inferno output) tell
one state only, from their frames (``classify.estimate_state``): idle where the loop waits in its
selector (nothing with uvloop, whose poll has no Python frame). Their other samples are busy,
blocked or waiting for the GIL or a CPU, and the file does not say which: those states are not
told (``told``), and their samples are ``untold``, with no share given (flagged ``estimated``).
Samples in frames too narrow to draw (an SVG's ``[pruned]`` leaves) are ``untold`` too.

No I/O happens here: the CLI and the HTTP API hand in loaded profiles (or the stacks of a
folded file as it is read). What is found is an ``analyze.analysis.Analysis``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter

from sidecar.analyze.analysis import Analysis, Depth, Ranked, function_of
from sidecar.classify.process import LoopThreads, ProcessInfo
from sidecar.classify.stacks import Facts, Frames, entry_index
from sidecar.profile import Profile
from sidecar.rules.frames import GC_FRAME, OFF_CPU_LEAVES, STATES, is_pruned, state_of

__all__ = ["Analysis", "Depth", "Ranked", "analyze", "analyze_counts", "by_framework",
           "function_of", "merge", "state_line"]  # fmt: skip


def analyze(
    profile: Profile,
    info: ProcessInfo | None = None,
    holders: Mapping[tuple[str, str], int] | None = None,
) -> Analysis:
    """The analysis of one target's profile; ``info`` (from discovery) names its framework and
    loop, corrected by the frames when they tell more; ``holders`` are the loop's gil samples
    by (name of the thread that held the GIL, where it was), as the sampler saw them."""
    pid = info.pid if info is not None else profile.target.pid
    return analyze_counts(profile.stacks.items(), profile.marked, pid, info, holders)


def analyze_counts(
    stacks: Iterable[tuple[str, int]],
    marked: bool,
    pid: int | None = None,
    info: ProcessInfo | None = None,
    holders: Mapping[tuple[str, str], int] | None = None,
) -> Analysis:
    """``analyze`` of stacks and counts in a profile's order (a stack may come again: what it
    adds up to is the same), ``marked`` as ``Profile.marked``.

    One pass over the stacks, each frame text judged once (``classify.stacks``): the stacks of
    event-loop threads are counted, and those of other threads too until a loop thread's is
    seen (without one, the shares are of all threads); the states a profile does not tell
    move to ``untold`` at the end, once its loop is known."""
    table = Frames()
    threads = LoopThreads()
    estimated = not marked
    loop_part, other_part = Analysis(estimated=estimated), Analysis(estimated=estimated)
    for stack, count in stacks:
        frames = table.of(stack)
        entry = entry_index(frames) if table.entries else None
        if entry is not None:
            threads.add(frames, count)
            _add(loop_part, stack, count, frames, entry)
        elif not threads.stacks:
            _add(other_part, stack, count, frames, None)
    result = loop_part if threads.stacks else other_part
    result.pid = pid
    result.role = info.role if info is not None else None
    result.no_loop_thread = not threads.stacks
    result.framework, result.loop = _framework_and_loop(threads, info)
    if estimated:  # the selector's wait tells idle; uvloop's poll shows no frame
        result.told = () if result.loop == "uvloop" else ("idle",)
    for state in STATES:
        if state not in result.told:
            result.untold += result.states[state]
            result.states[state] = 0
    result.gil_holders.update(holders or {})
    return result


_CODE = attrgetter("code")
_FUNCTION = attrgetter("function")


def _add(result: Analysis, stack: str, count: int, frames: list[Facts], entry: int | None) -> None:
    """Adds one stack of the chosen threads to ``result``."""
    # a stack of no synthetic frame on top (no "]" at its end) is of none of their cases
    marked = stack.endswith("]")
    if marked and is_pruned(stack):
        result.pruned += count
        result.untold += count
        return
    if result.estimated:
        state = "idle" if frames and frames[-1].poll else "busy"  # classify.estimate_state
    else:
        state = state_of(stack) if marked else "busy"
    result.states[state] += count  # those of a state not told move to untold at the end
    if state == "blocked":
        result.site_samples[_blocking_site(stack)] += count
    if state != "busy":
        return
    result.ranked += count
    if marked and stack.endswith(GC_FRAME):
        result.gc_samples += count
    depths = result.depth_histogram
    depth = sum(map(_CODE, frames))
    depths[depth] = depths.get(depth, 0) + count
    result.layers[_layer(frames)] += count
    if frames:
        result.self_samples[frames[-1].function] += count
    # Frames up to the one that entered the loop are in every loop sample: not ranked.
    above = frames
    if entry is not None:
        above = frames[entry + 1 :]
        depths = result.loop_depth_histogram
        depth = sum(map(_CODE, above))
        depths[depth] = depths.get(depth, 0) + count
    total = result.total_samples
    for name in set(map(_FUNCTION, above)):
        total[name] += count


def _layer(frames: list[Facts]) -> str:
    """``rules.layers.layer_of``: the layer of the innermost frame not of the standard
    library."""
    for one in reversed(frames):
        if one.layer is not None:
            return one.layer
    return "other"


def _framework_and_loop(threads: LoopThreads, info: ProcessInfo | None) -> tuple[str, str]:
    framework = threads.framework
    loop = threads.loop
    if info is None:
        return framework, loop
    if framework == "unknown":
        framework = info.framework
    # The mapped extension decides uvloop; frames only overrule it when asyncio's loop runs.
    if loop != "asyncio":
        loop = info.loop
    return framework, loop


def _blocking_site(stack: str) -> str:
    """The frame a blocked sample waits in: the last frame before the ``[blocked]`` leaf."""
    parts = stack.split(";")
    while parts and parts[-1] in OFF_CPU_LEAVES:
        parts.pop()
    return parts[-1] if parts else "(no frame)"


def merge(analyses: Iterable[Analysis], *, framework: str = "unknown") -> Analysis:
    """Several targets as one: states, depths, layers and function counts add up."""
    out = Analysis(framework=framework)
    loops: set[str] = set()
    told = set(STATES)
    for one in analyses:
        loops.add(one.loop)
        out.estimated |= one.estimated
        told &= set(one.told)
        out.untold += one.untold
        out.pruned += one.pruned
        out.ranked += one.ranked
        for state, count in one.states.items():
            out.states[state] += count
        for depth, count in one.depth_histogram.items():
            out.depth_histogram[depth] = out.depth_histogram.get(depth, 0) + count
        for depth, count in one.loop_depth_histogram.items():
            out.loop_depth_histogram[depth] = out.loop_depth_histogram.get(depth, 0) + count
        for layer, count in one.layers.items():
            out.layers[layer] += count
        out.self_samples.update(one.self_samples)
        out.total_samples.update(one.total_samples)
        out.site_samples.update(one.site_samples)
        out.gil_holders.update(one.gil_holders)
        out.gc_samples += one.gc_samples
        out.no_loop_thread |= one.no_loop_thread
    out.loop = loops.pop() if len(loops) == 1 else "mixed" if loops else "unknown"
    out.told = tuple(state for state in STATES if state in told)
    return out


def by_framework(analyses: Sequence[Analysis]) -> dict[str, Analysis]:
    """One merged analysis per framework of the processes that serve requests, in order of
    first appearance."""
    serving = [one for one in analyses if one.serves]
    names = list(dict.fromkeys(one.framework for one in serving))
    return {
        name: merge((one for one in serving if one.framework == name), framework=name)
        for name in names
    }


def _percent(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def state_line(analysis: Analysis) -> str:
    """The loop's states in one line, as ``record`` and ``stats`` print them: each state's
    share; with gil samples, who held the GIL most (share of the gil samples whose holder the
    sampler saw); with samples in a collection, the garbage collector's share of busy."""
    total = analysis.samples
    parts = {s: f"{s} {_percent(analysis.states[s], total)}" for s in STATES if analysis.is_told(s)}
    top = analysis.top_holders(1)
    if analysis.states["gil"] and top and "gil" in parts:
        thread, site, _, share = top[0]
        where = f" at {site}" if site else ""
        parts["gil"] += f" (GIL held by {thread!r}{where} {share:.0%})"
    out = list(parts.values())
    untold = [state for state in STATES if not analysis.is_told(state)]
    if untold:
        out.append(
            f"{', '.join(untold)}: not told by this file "
            f"({_percent(analysis.untold - analysis.pruned, total)} of samples)"
        )
    if analysis.pruned:
        out.append(f"not drawn {_percent(analysis.pruned, total)} (frames too narrow, no state)")
    if analysis.gc_samples:
        out.append(f"gc {_percent(analysis.gc_samples, analysis.ranked)} of busy")
    return " · ".join(out)
