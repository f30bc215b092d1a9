"""Fixtures: processes and load that never outlive the test that started them."""

from __future__ import annotations

from collections.abc import Iterator

import faultkit
import pytest
from faultkit import Sidecars
from helpers import REPORTS, LoadDriver, Spawner


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    spawner = Spawner()
    try:
        yield spawner
    finally:
        spawner.close()


@pytest.fixture
def load() -> Iterator[LoadDriver]:
    driver = LoadDriver()
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture
def sidecars() -> Iterator[Sidecars]:
    """Real `sidecar` processes for the fault suite, stopped when the test ends."""
    started = Sidecars()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session", autouse=True)
def _reports_dir() -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's summary line, when it ran (the whole report: tests/reports/faults.md)."""
    if not faultkit.RECORDED:
        return
    lines = faultkit.SUMMARY.read_text().splitlines()
    headline = next((line.strip("*") for line in lines if line.startswith("**")), "")
    terminalreporter.write_sep("-", "fault suite")
    terminalreporter.write_line(f"{headline} (tests/reports/faults.md)")
