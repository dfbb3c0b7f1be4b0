import logging
from collections.abc import Iterator

import pytest

from tests.servers import fake_engine, prometheus_server, redis_server  # noqa: F401  (shared server fixtures)

pytest_plugins = ["tests.cluster.fixtures"]


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """Tests that run a CLI's ``main()`` in process configure the root logger with a handler on the
    stderr pytest captured for that test; put the root logger back afterwards, so later records never
    go to a closed capture stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
