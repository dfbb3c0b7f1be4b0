import pytest

from tests.warmpool.helpers import GPU_TOL, node, pod_spec
from warmscale.common.quantity import parse_quantity
from warmscale.warmpool.matching import fits, free_fit, matching_nodes, replica_requests


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("500m", 0.5),
        ("16Gi", 16 * 2**30),
        ("1k", 1000),
        ("1e3", 1000),
        ("2", 2),
        ("1E", 1e18),
        (3, 3),
    ],
)
def test_quantity(raw: str, value: float) -> None:
    assert parse_quantity(raw) == value


@pytest.mark.parametrize("raw", ["", "x", "1Zi", "nan", "1.2.3"])
def test_bad_quantity(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(raw)


def test_replica_requests_init_containers_and_limits_only_gpus() -> None:
    spec = pod_spec(gpus=2, cpu="4", memory="8Gi")
    spec["containers"].append({"name": "side", "resources": {"requests": {"cpu": "500m"}}})
    spec["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "16", "memory": "1Gi"}}}]
    r = replica_requests(spec)
    assert r["cpu"] == 16 and r["memory"] == 8 * 2**30 and r["nvidia.com/gpu"] == 2


AFF_IN = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
            ]
        }
    }
}
AFF_GT = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                        {"key": "spot", "operator": "DoesNotExist"},
                    ]
                }
            ]
        }
    }
}

CASES = [
    # (description, pod spec, node, fits, reason fragment)
    ("fits", pod_spec(), node("n"), True, ""),
    ("wrong product", pod_spec(), node("n", product="NVIDIA-L4"), False, "selector"),
    ("no tolerations", pod_spec(tolerate=False), node("n"), False, "taint nvidia.com/gpu"),
    ("too many gpus", pod_spec(gpus=9), node("n"), False, "allocatable"),
    ("too much memory", pod_spec(memory="3Ti"), node("n"), False, "allocatable"),
    ("not ready", pod_spec(), node("n", ready=False), False, "not ready"),
    ("cordoned", pod_spec(), node("n", unschedulable=True), False, "not ready"),
    ("cpu node", pod_spec(product=None), node("c", product=None), False, "allocatable"),
    ("affinity In", pod_spec(product=None, affinity=AFF_IN), node("n", labels={"pool": "b"}), True, ""),
    ("affinity In miss", pod_spec(product=None, affinity=AFF_IN), node("n", labels={"pool": "z"}), False, "affinity"),
    ("affinity matchFields", pod_spec(product=None, affinity=AFF_IN), node("special"), True, ""),
    (
        "affinity Gt",
        pod_spec(product=None, affinity=AFF_GT),
        node("n", labels={"nvidia.com/gpu.memory": "81559"}),
        True,
        "",
    ),
    (
        "affinity Gt small",
        pod_spec(product=None, affinity=AFF_GT),
        node("n", labels={"nvidia.com/gpu.memory": "23034"}),
        False,
        "affinity",
    ),
    (
        "affinity DoesNotExist",
        pod_spec(product=None, affinity=AFF_GT),
        node("n", labels={"nvidia.com/gpu.memory": "81559", "spot": "1"}),
        False,
        "affinity",
    ),
    ("NoExecute untolerated", pod_spec(), node("n", taints=[{"key": "x", "effect": "NoExecute"}]), False, "taint x"),
    ("PreferNoSchedule ignored", pod_spec(), node("n", taints=[{"key": "x", "effect": "PreferNoSchedule"}]), True, ""),
    ("tolerate all", pod_spec(tolerate=False, tolerations=[{"operator": "Exists"}]), node("n"), True, ""),
    (
        "Equal value mismatch",
        pod_spec(tolerate=False, tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]),
        node("n"),
        False,
        "taint",
    ),
]


@pytest.mark.parametrize(("desc", "spec", "nd", "ok", "reason"), CASES, ids=[c[0] for c in CASES])
def test_fits(desc: str, spec: dict, nd: dict, ok: bool, reason: str) -> None:
    r = fits(spec, nd)
    assert r.fits is ok, r.reason
    assert reason in r.reason


def test_matching_nodes_heterogeneous_fleet_sorted() -> None:
    nodes = [node("h2"), node("l4-1", product="NVIDIA-L4", gpus=4), node("h1"), node("cpu", product=None)]
    assert [n["metadata"]["name"] for n in matching_nodes(pod_spec(), nodes)] == ["h1", "h2"]


def test_free_fit_counts_active_pods_on_node() -> None:
    n = node("h1", gpus=2)
    spec = pod_spec(gpus=1)
    running = {
        "metadata": {"name": "p"},
        "spec": {**pod_spec(gpus=1), "nodeName": "h1"},
        "status": {"phase": "Running"},
    }
    done = {"metadata": {"name": "q"}, "spec": {**pod_spec(gpus=1), "nodeName": "h1"}, "status": {"phase": "Succeeded"}}
    assert free_fit(spec, n, [running, done])
    assert not free_fit(spec, n, [running, dict(running, metadata={"name": "p2"})])
    assert GPU_TOL in spec["tolerations"]
