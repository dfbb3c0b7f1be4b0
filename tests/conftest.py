from tests.servers import fake_engine, prometheus_server, redis_server  # noqa: F401  (shared server fixtures)

pytest_plugins = ["tests.cluster.fixtures"]
