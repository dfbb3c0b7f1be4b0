import asyncio
import functools
import logging
import os
import sys
import threading
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

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


# -- two workers, two clusters: the real-server suites apart, the pure tests after them -------------
# Tests on real servers (the local cluster, KEDA, Kueue, Redis, Prometheus, processes killed on purpose)
# run in two scopes, in collection order within each, one per pytest-xdist worker
# (pyproject.toml: ``-n 2 --dist loadscope``): ``real-keda`` (every suite that needs KEDA, Kueue or
# Volcano beside the control plane: they start once, on that worker) and ``real-other`` (the control
# plane alone, Redis, Prometheus, fault injection). Each worker starts its own control plane, on its own
# pod range (tests/cluster/fixtures.py). The pure tests are handed out once a worker's real scope is
# nearly done. The controller sees only node ids, so a file's scope comes from its path and text;
# pytest_collection_modifyitems below checks that rule against what each collected test uses.
REAL_SERVER_FIXTURES = ("k8s_cluster", "keda_cluster", "volcano_cluster", "kueue_cluster", "redis_server",
                        "prometheus_server")
BESIDE_FIXTURES = ("keda_cluster", "volcano_cluster", "kueue_cluster")  # components beside the plane
REAL_SERVER_MARKERS = ("cluster", "keda", "volcano", "servers", "faults")
REAL_SERVER_FOLDERS = ("tests/keda/", "tests/faults/", "tests/cluster/")
BESIDE_FOLDERS = ("tests/keda/", "tests/cluster/")
REAL_SERVER_WORDS = ("k8s_", "_cluster", "redis_server", "prometheus_server", "mark.cluster", "mark.servers",
                     "mark.keda", "mark.volcano")
BESIDE_WORDS = BESIDE_FIXTURES
SCOPE_BESIDE, SCOPE_REAL = "real-keda", "real-other"
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def scope_of(path: str) -> str | None:
    """The real-server scope of the test file ``path`` (relative to the repository); None: pure."""
    try:
        text = (ROOT / path).read_text(encoding="utf-8")
    except OSError:
        text = "k8s_ keda_cluster"  # unknown: the safe side (in order, beside the servers)
    if path.startswith(BESIDE_FOLDERS) or any(w in text for w in BESIDE_WORDS):
        return SCOPE_BESIDE
    if path.startswith(REAL_SERVER_FOLDERS) or any(w in text for w in REAL_SERVER_WORDS):
        return SCOPE_REAL
    return None


def uses_real_servers(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(fixtures & set(REAL_SERVER_FIXTURES)) or any(item.get_closest_marker(m) for m in REAL_SERVER_MARKERS)


@pytest.hookimpl(trylast=True)  # after the folders' conftests have added their markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    strays = set()
    for item in items:
        path = item.nodeid.split("::")[0]
        beside = bool(set(getattr(item, "fixturenames", ())) & set(BESIDE_FIXTURES))
        if (beside and scope_of(path) != SCOPE_BESIDE) or (uses_real_servers(item) and scope_of(path) is None):
            strays.add(path)
    if strays:
        raise pytest.UsageError("tests outside the xdist scope their servers need (tests/conftest.py, "
                                f"REAL_SERVER_WORDS / BESIDE_WORDS): {', '.join(sorted(strays))}")


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # without pytest-xdist the suite runs in one process, in order
    LoadScopeScheduling = None


if LoadScopeScheduling is not None:
    class RealServersApart(LoadScopeScheduling):  # type: ignore[misc, valid-type]
        """loadscope with the two real-server scopes first (one per worker); a pure file is its own
        scope, handed out when a worker is nearly idle."""

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return scope_of(path) or path

        def _assign_work_unit(self, node: Any) -> None:
            for scope in (SCOPE_REAL, SCOPE_BESIDE):  # the beside scope ends up first
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadscope":
            return None
        return RealServersApart(config, log)
