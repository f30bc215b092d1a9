"""Fixtures: processes and load that never outlive the test that started them."""

from __future__ import annotations

from collections.abc import Iterator

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
