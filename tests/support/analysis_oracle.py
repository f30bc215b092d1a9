"""The test oracle of ``analyze.threads.analyze`` and of reading folded text: the slow way,
every frame of every stack through the rules one by one (``code_frames``,
``loop_entry_index``, ``layer_of``, ``SERVER_FILES``, ``ASYNCIO_LOOP``), nothing kept between
stacks, and every line through ``_COUNT``. The product judges each frame text once and reads
a piece at a time; both must give what this gives."""

from __future__ import annotations

from sidecar.analyze.threads import Analysis
from sidecar.classify.threads import estimate_state
from sidecar.errors import ProfileFormatError
from sidecar.profile import _COUNT, Profile, check_total, count_of
from sidecar.rules.frames import (
    GC_FRAME,
    OFF_CPU_LEAVES,
    PRUNED_LEAF,
    Frame,
    code_frames,
    is_pruned,
    state_of,
)
from sidecar.rules.layers import layer_of
from sidecar.rules.loops import loop_entry_index
from sidecar.rules.processes import ASYNCIO_LOOP, SERVER_FILES


def parse(text: str, source: str = "input") -> Profile:
    """Folded text, every line through ``_COUNT`` (blank lines and ``#`` comments skipped)."""
    profile = Profile()
    bad, total = [], 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _COUNT.match(stripped)
        if match is None:
            bad.append(number)
            continue
        count = count_of(match["count"], f"{source}: line {number}")
        total += count
        profile.add(match["stack"], count)
    check_total(total, source)
    if bad:
        where = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        raise ProfileFormatError(
            f"{source}: line {where} is not folded text ('frame;frame;... COUNT')"
        )
    if not profile.stacks:
        raise ProfileFormatError(f"{source}: no stacks found")
    profile.marked = any(state_of(s) != "busy" for s in profile.stacks)
    return profile


def _function(frame: Frame) -> str:
    return f"{frame.name} ({frame.file})" if frame.file else frame.name


def _framework(loop_stacks: dict[str, int]) -> str:
    score = dict.fromkeys(SERVER_FILES, 0)
    for stack, count in loop_stacks.items():
        files = {frame.file.replace("\\", "/") for frame in code_frames(stack)}
        for name, suffixes in SERVER_FILES.items():
            if any(file.endswith(suffix) for file in files for suffix in suffixes):
                score[name] += count
    best = max(score, key=lambda name: score[name])
    return best if score[best] else "unknown"


def _loop(loop_stacks: dict[str, int]) -> str:
    samples = 0
    for stack, count in loop_stacks.items():
        samples += count
        for frame in code_frames(stack):
            name = frame.name.rsplit(".", 1)[-1]
            if any(name == fn and frame.file.endswith(sfx) for fn, sfx in ASYNCIO_LOOP):
                return "asyncio"
            if frame.file.replace("\\", "/").split("/")[0] == "uvloop":
                return "uvloop"
    return "uvloop" if samples else "unknown"


def analysis(profile: Profile) -> Analysis:
    """What ``analyze(profile)`` gives, the slow way."""
    stacks = profile.stacks
    loop_stacks = {
        stack: count
        for stack, count in stacks.items()
        if loop_entry_index(code_frames(stack)) is not None
    }
    result = Analysis(
        pid=profile.target.pid, estimated=not profile.marked, no_loop_thread=not loop_stacks
    )
    result.framework, result.loop = _framework(loop_stacks), _loop(loop_stacks)
    if result.estimated:
        result.told = () if result.loop == "uvloop" else ("idle",)
    for stack, count in (loop_stacks or stacks).items():
        if is_pruned(stack):
            result.pruned += count
            result.untold += count
            continue
        state = estimate_state(stack) if result.estimated else state_of(stack)
        if state in result.told:
            result.states[state] += count
        else:
            result.untold += count
        if state == "blocked":
            parts = stack.split(";")
            while parts and parts[-1] in OFF_CPU_LEAVES:
                parts.pop()
            result.site_samples[parts[-1] if parts else "(no frame)"] += count
        if state != "busy":
            continue
        result.ranked += count
        if stack.endswith(GC_FRAME):
            result.gc_samples += count
        frames = code_frames(stack)
        depth = sum(1 for frame in frames if frame.is_code)
        result.depth_histogram[depth] = result.depth_histogram.get(depth, 0) + count
        result.layers[layer_of(frames)] += count
        if frames:
            result.self_samples[_function(frames[-1])] += count
        entry = loop_entry_index(frames)
        above = frames[entry + 1 :] if entry is not None else frames
        if entry is not None:
            high = sum(1 for frame in above if frame.is_code)
            result.loop_depth_histogram[high] = result.loop_depth_histogram.get(high, 0) + count
        for name in {_function(frame) for frame in above}:
            result.total_samples[name] += count
    return result


def through(stacks: dict[str, int], frames: set[str]) -> dict[str, int]:
    """Samples of ``stacks`` through each of ``frames`` (``svg_counts._through``): each stack's
    path (less a ``[pruned]`` leaf) and every path it cuts down to at a ';'."""
    out = dict.fromkeys(frames, 0)
    for stack, count in stacks.items():
        path = stack.removesuffix(PRUNED_LEAF).removesuffix(";") if is_pruned(stack) else stack
        while path:
            if path in out:
                out[path] += count
            at = path.rfind(";")
            path = path[:at] if at >= 0 else ""
    return out
