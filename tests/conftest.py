from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run, so the suite passes or fails the same
# way each time (a counterexample found once is kept as an @example in its test). Set
# HYPOTHESIS_PROFILE=explore to search with fresh random examples instead.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return request.param
