from __future__ import annotations

import compileall
import os
import secrets
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The same examples on every run, and no per-example wall-time limit: a property test
# fails for an input, never for a loaded host (what Hypothesis's own "ci" profile does).
# `pytest --hypothesis-profile=explore` draws new examples.
settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("deterministic")


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" in os.environ:
        # pytest-xdist starts its workers in the runner's process group. Tests that find what
        # they left running by process group (forked searchers carry no environment marker)
        # must not see another worker's processes, so each worker leads a group of its own.
        os.setpgid(0, 0)
    # The suite starts hundreds of Python processes that import the package (servers, the
    # CLI, spawned workers). Where PYTHONDONTWRITEBYTECODE is set, as on some hosts and CI
    # images, each would compile it from source again; written once here, they read it.
    for package in ("workspace_tools", "sandbox"):
        source = Path(config.rootpath, package)
        if source.is_dir():  # not so when the tests run against an installed wheel
            compileall.compile_dir(source, quiet=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker more than the cores this process may run on.

    Most of the suite's time is spent waiting on child processes (servers, sandboxes,
    commands), so a worker a core leaves cores idle; one more keeps them busy (measured on 2
    cores: 444 s against 538 s). ``--maxprocesses`` still caps the count, and
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still overrides it (xdist's own hook reads it).
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def clock_moved_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tree fingerprints judge the tree as if the file-system clock had moved on since its
    last change (as it has a few seconds later): a tree a test has just written is then
    cacheable, and every change after it still shows in the stats."""
    from workspace_tools.workspace import _fingerprint

    ahead = _fingerprint.RACY_NS * 2
    monkeypatch.setattr(_fingerprint, "time_ns", lambda: time.time_ns() + ahead)


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> str:
    """A random value in the environment of every process the test starts, so that
    ``tests._processes.survivors(marker)`` finds what the test left running."""
    value = secrets.token_hex(12)
    monkeypatch.setenv("WT_TEST_MARKER", value)
    return f"WT_TEST_MARKER={value}"
