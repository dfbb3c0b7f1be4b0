"""Local Kubernetes test cluster: real etcd/apiserver/controller-manager/scheduler built from
Go modules, with a KWOK-simulated GPU fleet. See docs/cluster.md."""

from .binaries import Binaries, BinariesMissing, locate
from .fleet import DEFAULT_POOLS, NodePool, default_fleet, gpu_fleet
from .harness import Cluster, ClusterConfig, ClusterStartError, default_state_dir

__all__ = [
    "DEFAULT_POOLS",
    "Binaries",
    "BinariesMissing",
    "Cluster",
    "ClusterConfig",
    "ClusterStartError",
    "NodePool",
    "default_fleet",
    "default_state_dir",
    "gpu_fleet",
    "locate",
]
