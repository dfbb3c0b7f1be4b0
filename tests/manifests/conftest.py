# The local-cluster fixtures, used by name in this package's tests.
from tests.cluster.fixtures import k8s_admin, k8s_cluster, k8s_namespace, k8s_node_pool  # noqa: F401
