"""The frame grammar and the synthetic leaves: how a folded stack is written and read.

Folded text is the interchange format: one line per unique stack, frames root first joined by
``;``, then a space and the sample count. Frames read ``function (file:line)``. Off-CPU samples
end in a synthetic leaf, ``[idle]``, ``[blocked]`` or ``[gil]``; a stack without one is busy. A
sample taken while the interpreter collects garbage has a ``[gc]`` frame on top of the code that
set the collection off (it is busy: the collection runs on that thread).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IDLE_LEAF = "[idle]"
BLOCKED_LEAF = "[blocked]"
#: The leaf of a thread waiting for the GIL that another thread holds.
GIL_LEAF = "[gil]"
#: The leaf of a thread runnable but waiting for a CPU: the kernel runs something else (a
#: container at its CPU limit, more runnable threads than cores).
CPU_WAIT_LEAF = "[cpu_wait]"
#: The frame on top of a stack sampled while its thread collects garbage.
GC_FRAME = "[gc]"
#: The states of a thread sample; a stack's leaf says which (``state_of``).
STATES = ("busy", "idle", "blocked", "gil", "cpu_wait")
#: The leaf of each state that is not busy; a busy stack has none.
LEAVES = {"idle": IDLE_LEAF, "blocked": BLOCKED_LEAF, "gil": GIL_LEAF, "cpu_wait": CPU_WAIT_LEAF}
OFF_CPU_LEAVES = tuple(LEAVES.values())
#: Frames the sampler adds that name no code: the leaves and the collector's frame.
SYNTHETIC_FRAMES = (*OFF_CPU_LEAVES, GC_FRAME)
#: The root frames a profile may put above the code: a thread's (``record -t``), a process's
#: (``record -s``, and py-spy's ``process PID:"COMMAND"``).
ROOT_FRAME = re.compile(r"thread \(|process \(|process \d+:")
#: The leaf of width a flamegraph SVG did not draw, its frames being too narrow: samples whose
#: state (and code) the file does not tell; a stack of it alone holds top-level frames'.
PRUNED_LEAF = "[pruned]"
#: A frame of folded text: ``function (file:line)``.
FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?):(?P<line>-?\d+)\)$")


@dataclass(frozen=True)
class Frame:
    """One parsed frame; `file` is empty and `line` 0 for frames that name no code location."""

    name: str
    file: str = ""
    line: int = 0

    @property
    def is_code(self) -> bool:
        return bool(self.file)


def parse_frame(text: str) -> Frame:
    """Splits ``function (file:line)``; anything else is a frame with only a name."""
    match = FRAME.match(text)
    if match is None:
        return Frame(text)
    return Frame(match["name"], match["file"], int(match["line"]))


def format_frame(name: str, file: str = "", line: int = 0) -> str:
    """A frame as folded text: ``function (file:line)``, the name alone where no file is known
    (``parse_frame``'s inverse)."""
    return f"{name} ({file}:{line})" if file else name


def exact_frame(text: str) -> Frame:
    """A frame for the formats that keep a frame's parts (pprof, speedscope): parsed where
    ``format_frame`` writes it back as the same text, else named by the whole text (``x (:0)``,
    ``f (a.py:007)``), so that every frame reads back as it was written."""
    frame = parse_frame(text)
    if frame.file and format_frame(frame.name, frame.file, frame.line) == text:
        return frame
    return Frame(text)


def is_pruned(stack: str) -> bool:
    """Whether a stack holds the width of frames too narrow to draw (``PRUNED_LEAF``)."""
    return stack.endswith(PRUNED_LEAF)


def state_of(stack: str) -> str:
    """The state a folded stack records: its synthetic leaf, or busy without one."""
    for state, leaf in LEAVES.items():
        if stack.endswith(leaf):
            return state
    return "busy"


def code_frames(stack: str) -> list[Frame]:
    """The frames of a folded stack, without synthetic leaves, the collector's frame and
    thread/process roots."""
    frames = [parse_frame(part) for part in stack.split(";")] if stack else []
    while frames and frames[-1].name in SYNTHETIC_FRAMES and not frames[-1].file:
        frames.pop()
    while frames and not frames[0].is_code and ROOT_FRAME.match(frames[0].name):
        frames.pop(0)
    return frames


def process_frame(pid: int, cmdline: str) -> str:
    """The root frame of a process's stacks in a profile of several (``record -s``), as py-spy
    writes it: ``process PID:"COMMAND LINE"``."""
    return f'process {pid}:"{cmdline}"'.replace(";", ":")


def leaf_for(state: str) -> str | None:
    """The synthetic leaf frame that marks a state other than busy in folded output."""
    return LEAVES.get(state)
