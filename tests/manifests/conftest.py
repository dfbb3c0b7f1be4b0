from tests.cluster.fixtures import k8s_cluster  # noqa: F401  (the session cluster fixture, used by name)
