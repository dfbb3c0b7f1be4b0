import asyncio
import logging
import os
import sys
import threading
import warnings
from collections.abc import Generator, Iterator

import pytest
from hypothesis import settings

from tests.servers import fake_engine, prometheus_server, redis_server  # noqa: F401  (shared server fixtures)

pytest_plugins = ["tests.cluster.fixtures"]

# Property tests draw the same examples on every run (a CI run never fails on a draw no run before
# made: one did, on a test's own bug); HYPOTHESIS_PROFILE=explore draws afresh to look for new cases.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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


# How long before pytest-timeout's limit (pyproject.toml, ``timeout``) the watchdog below prints the
# test's asyncio tasks: late enough to be rare, early enough that the report is captured before the
# timeout kills the test.
TASK_DUMP_LEAD_SECONDS = 15.0


def _dump_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Runs on the test's loop (it is idle in select when a test hangs on an await): print where every
    task waits, which pytest-timeout's thread dump cannot show."""
    print(f"+++ asyncio tasks {TASK_DUMP_LEAD_SECONDS:.0f} s before the timeout +++", file=sys.stderr)
    for task in asyncio.all_tasks(loop):
        print(f"--- {task.get_name()} ---", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A hung async test shows its tasks' stacks, not just idle threads."""
    limit = float(item.config.getini("timeout") or 0)
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        limit = float(marker.args[0])
    loop = None
    if limit > TASK_DUMP_LEAD_SECONDS and asyncio.iscoroutinefunction(getattr(item, "obj", None)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:  # pytest-asyncio's runner sets its loop as the main thread's current loop
                loop = asyncio.get_event_loop_policy().get_event_loop()
            except RuntimeError:
                loop = None
    timer = None
    if loop is not None and not loop.is_closed():
        timer = threading.Timer(limit - TASK_DUMP_LEAD_SECONDS,
                                lambda: loop.is_closed() or loop.call_soon_threadsafe(_dump_tasks, loop))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
