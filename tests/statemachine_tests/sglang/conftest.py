"""One SGLang driver pool for the default tier's tests on SGLang's real scheduler: its start-up
(importing SGLang, building a Scheduler) is most of each such test's time."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from asyncspec.engine.sglang.client import SGLangPool


@pytest.fixture(scope="session")
def sglang_pool() -> Iterator[SGLangPool]:
    pool = SGLangPool()
    try:
        yield pool
    finally:
        pool.close()
