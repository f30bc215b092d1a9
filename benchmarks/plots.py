"""The figure of benchmarks/REPORT.md: one panel per part that has results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks import cost
from benchmarks.overhead import LEGS
from benchmarks.report import cost_figures, modeled

#: Per leg or tool: its name on the x axis, and its colour.
SHORT = {
    "none": "none",
    "sidecar": "sidecar",
    "sidecar-blocking": "sidecar\n--blocking",
    "py-spy": "py-spy\n(blocking)",
    "py-spy-nonblocking": "py-spy\n--nonblocking",
}
COLORS = {"none": "#777777", "sidecar": "#1f77b4", "sidecar-blocking": "#17becf",
          "py-spy": "#d62728", "py-spy-nonblocking": "#ff9896", "floor": "#2ca02c"}  # fmt: skip


def _legs(ax: Any, o: dict[str, Any], value: Any, title: str, ylabel: str) -> None:
    for index, leg in enumerate(LEGS):
        values = [value(r) for r in o["legs"] if r["leg"] == leg]
        ax.scatter([index] * len(values), values, color=COLORS[leg], alpha=0.6, s=18)
        if values:
            values.sort()
            median = values[len(values) // 2]
            ax.hlines(median, index - 0.3, index + 0.3, color=COLORS[leg], linewidth=2)
    ax.set_xticks(range(len(LEGS)), [SHORT[leg] for leg in LEGS], fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)


def plot(results: dict[str, Any], path: Path) -> None:
    rows: list[list[str]] = []
    if "overhead" in results:
        rows.append(["rps", "modeled", "p99"])
    second = [name for name in ("pauses", "rates") if name in results]
    if second:
        rows.append([*second, *(["."] * (3 - len(second)))])
    if "cost" in results:
        rows.append(["cost"] * 3)
    if not rows:
        return
    fig, axes = plt.subplot_mosaic(rows, figsize=(13, 4.2 * len(rows)))
    for panel, ax in axes.items():
        if panel == "rps":
            _legs(ax, results["overhead"], lambda r: r["rps"], "1. saturated req/s per round",
                  "requests / s")  # fmt: skip
        elif panel == "modeled":
            _legs(ax, results["overhead"], modeled,
                  "1. req per target CPU-second × (1 − stopped)", "requests / s")  # fmt: skip
        elif panel == "p99":
            _legs(ax, results["overhead"], lambda r: r["paced"]["p99_us"] / 1000,
                  "2. p99 latency at half saturation", "ms (log)")  # fmt: skip
            ax.set_yscale("log")
        elif panel == "pauses":
            _pauses(ax, results["pauses"])
        elif panel == "cost":
            _cost(ax, results["cost"])
        elif panel == "rates":
            _rates(ax, results["rates"])
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _pauses(ax: Any, p: dict[str, Any]) -> None:
    labels, index = [], 0
    for mode in p["modes"]:
        for threads in (0, 150):
            values = [
                r["blocking"]["pause_p99"] * 1e6
                for r in p["runs"]
                if r["mode"] == mode and r["threads"] == threads
            ]
            color = "#1f77b4" if threads == 0 else "#ff7f0e"
            ax.scatter([index] * len(values), values, color=color, s=18)
            labels.append(f"{mode}\n{'+150 threads' if threads else '1 thread'}")
            index += 1
    ax.axhline(50, color="green", linestyle="--", linewidth=1, label="goal 50 µs")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("pause p99 (µs, log)", fontsize=8)
    ax.set_title("3. blocking mode: pause p99 per run", fontsize=9)
    ax.legend(fontsize=7)


def _cost(ax: Any, c: dict[str, Any]) -> None:
    figures = cost_figures(c)
    perf = c["perf"]
    total = sum(perf.values()) or 1
    per_sample = (figures["sampler"] + figures["python"]) * 1e6
    items = [(short, perf.get(key, 0) / total * per_sample) for key, _, short in cost.CATEGORIES]
    items = [(label, value) for label, value in items if value > 0]
    ax.bar(range(len(items)), [v for _, v in items], color="#1f77b4")
    ax.set_xticks(range(len(items)), [label for label, _ in items], fontsize=7, rotation=30)
    ax.set_ylabel("µs of CPU per sample", fontsize=8)
    ax.set_title(
        f"4. sidecar serve: {per_sample:.0f} µs of CPU per sample, by part (perf shares)",
        fontsize=9,
    )
    ax.tick_params(axis="y", labelsize=7)


def _rates(ax: Any, r: dict[str, Any]) -> None:
    for mode, style in (("normal", "-"), ("rt", "--")):
        for tool in r["tools"]:
            points = sorted(
                (x["rate"], x.get("late_share", x["short_share"]) * 100)
                for x in r["runs"]
                if x["tool"] == tool and x["mode"] == mode
            )
            if points:
                ax.plot(
                    [p[0] for p in points],
                    [max(p[1], 0.01) for p in points],
                    style,
                    marker="o",
                    markersize=3,
                    color=COLORS[tool],
                    label=f"{tool} ({mode})",
                )
    ax.axhline(1, color="green", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("asked rate (Hz)", fontsize=8)
    ax.set_ylabel("% late+missed (sidecar, floor) / short (py-spy); 0 at 0.01", fontsize=7)
    ax.set_title("5. sampling rate: share of samples lost", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", framealpha=0.6)
