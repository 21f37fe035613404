from __future__ import annotations

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


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param
