"""The one writer of every benchmark report: the JSON of its figures and its Markdown.

A benchmark hands a ``Report`` its figures (saved as JSON, from which the report can be written
again with ``--from-json``), its tables as rows (dicts or objects) and ``Col`` specs (header,
value, format, unit), and the few lines of text around them: headings, and the conclusions,
each a sentence computed from the figures.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Col:
    """One column: ``header`` (with `` (unit)`` when given); a row's value is ``value`` of it (a
    key or attribute name, or a function of the row; the header itself by default), written with
    ``fmt`` (a format string or a function); None is an empty cell. Numbers align right."""

    header: str
    value: str | Callable[[Any], Any] | None = None
    fmt: str | Callable[[Any], str] = "{}"
    unit: str = ""
    left: bool = False


def cols(*headers: str) -> list[Col]:
    """Columns of rows that are tuples, in order (a short tuple leaves the last cells empty); a
    header ending in "<" aligns left."""
    return [Col(h.rstrip("<"), lambda r, i=i: r[i] if i < len(r) else None, left=h.endswith("<"))
            for i, h in enumerate(headers)]  # fmt: skip


def get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, dict) else getattr(row, key)


def cell(value: Any, fmt: str | Callable[[Any], str] = "{}") -> str:
    if value is None or value == "":
        return ""
    if callable(fmt):
        return fmt(value)
    return fmt.format(value) if not isinstance(value, str) else value


def table(rows: Iterable[Any], cols: Sequence[Col]) -> list[str]:
    """A Markdown table of ``rows``, one line per row."""
    head = [c.header + (f" ({c.unit})" if c.unit else "") for c in cols]
    align = "".join("---|" if c.left else "---:|" for c in cols)
    lines = ["| " + " | ".join(head) + " |", "|" + align]
    for row in rows:
        cells = (cell(c.value(row) if callable(c.value) else get(row, c.value or c.header), c.fmt)
                 for c in cols)  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def med(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def span(values: Iterable[float], fmt: str = "{:.3f}", scale: float = 1.0) -> str:
    """``min–max`` of the values."""
    values = [v * scale for v in values]
    return f"{fmt.format(min(values))}–{fmt.format(max(values))}" if values else "–"


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def depth(data: Any) -> int:
    if isinstance(data, dict | list) and data:
        return 1 + max(map(depth, data.values() if isinstance(data, dict) else data))
    return 0


def dumps(data: Any, indent: int = 0) -> str:
    """JSON with every object or list at most two levels deep on one line: a line per row."""
    if depth(data) <= 2:
        return json.dumps(data, ensure_ascii=False)
    pad = " " * (indent + 1)
    if isinstance(data, list):
        items = [pad + dumps(v, indent + 1) for v in data]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}" for k, v in data.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def keep(data: Any, spec: Any) -> Any:
    """``data`` with only the keys ``spec`` names (nested: a key's spec for its value, True for
    all of it; a set of keys keeps those; ``"*"`` keeps every other key whose value is plain);
    lists element-wise."""
    if spec is True:
        return data
    if isinstance(data, list):
        return [keep(v, spec) for v in data]
    if not isinstance(data, dict):
        return data
    spec = dict.fromkeys(spec, True) if isinstance(spec, set) else spec
    out = {k: keep(v, spec[k]) for k, v in data.items() if k in spec}
    if "*" in spec:
        out |= {k: v for k, v in data.items() if k not in out and not isinstance(v, dict | list)}
    return out


class Report:
    """A report being written: ``HERE/NAME.md`` and its figures ``HERE/NAME.json`` (or in
    ``out``)."""

    def __init__(self, name: str, out: Path | None = None) -> None:
        (out or HERE).mkdir(parents=True, exist_ok=True)
        self.md = (out or HERE) / f"{name}.md"
        self.json = (out or HERE) / f"{name}.json"
        self.lines: list[str] = []

    def add(self, *blocks: str | list[str]) -> Report:
        """Paragraphs (a string each) and blocks of lines (a list each, a table or a list of
        points), each followed by a blank line; an empty one is left out."""
        for block in blocks:
            if block:
                self.lines += [block] if isinstance(block, str) else list(block)
                self.lines.append("")
        return self

    def table(self, rows: Iterable[Any], cols: Sequence[Col], head: str = "") -> Report:
        """A table, after ``head`` (a line that introduces it) when given."""
        return self.add(head, table(rows, cols))

    def save(self, figures: dict[str, Any]) -> None:
        self.json.write_text(dumps(figures) + "\n")

    def write(self) -> str:
        text = "\n".join(self.lines).rstrip("\n") + "\n"
        self.md.write_text(text)
        return text
