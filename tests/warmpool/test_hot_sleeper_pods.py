"""The hot tier's objects (pure): sleeper pods made from the workload's template, the shared DRA
claims, the pool's GPUs from ResourceSlices, and the time-sliced fallback's map from DCGM samples."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.servers import SAMPLES_DIR
from warmscale.signals.engines.dcgm import attributions
from warmscale.signals.parsing import parse_text
from warmscale.warmpool.annotations import AnnotationError
from warmscale.warmpool.controller import workload_from
from warmscale.warmpool.hot.config import HOT_HOST_RAM, NODE_DRA_DRIVER, parse_hot, parse_pool_node, watched_namespaces
from warmscale.warmpool.hot.devices import DCGM_PREFIX, claim_device, dcgm_attribution, dra_devices
from warmscale.warmpool.hot.pool import Placement
from warmscale.warmpool.hot.sleeper_pods import (
    DEVICE_FROM_DCGM,
    SleeperTarget,
    shared_claim,
    sleeper_pod,
)
from warmscale.warmpool.hot.sleepers import sleeper_from_pod

NS = "llm"
ANN = {"warmscale.io/hot-standby": "2", "warmscale.io/hot-pool": "shared", "warmscale.io/engine": "vllm"}


def deployment(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": "llama"}
    return {"metadata": {"name": "llama", "namespace": NS, "uid": "u-1", "annotations": annotations or dict(ANN)},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {"kwok.x-k8s.io/ready-delay": "1s"}},
                "spec": {"containers": [{
                    "name": "engine", "image": "vllm/vllm-openai:v0.17.0",
                    "args": ["--model", "meta-llama/Llama-3.1-8B", "--served-model-name", "llama-8b"],
                    "ports": [{"name": "http", "containerPort": 8001}],
                    "env": [{"name": "HF_HOME", "value": "/cache"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}}}],
                    "resourceClaims": [{"name": "own", "resourceClaimTemplateName": "gpu-template"}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}}


def slice_(node: str, devices: list[dict[str, Any]], driver: str = "gpu.warmscale.test") -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": devices}}


def test_a_dra_sleeper_is_the_template_with_sleep_flags_on_the_shared_claim_and_no_workload_labels() -> None:
    wl = workload_from("Deployment", deployment())
    cfg = parse_hot(wl.annotations)
    assert cfg is not None
    pod = sleeper_pod(wl, cfg, SleeperTarget(Placement(f"{NS}/llama", 1, "n1", "drv/n1/gpu-3"), "ws-hot-shared-abc",
                                             "NVIDIA-H100"))
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"].endswith("-1") and meta["namespace"] == NS
    # The workload's selector never matches it: no template labels at all; warmscale's own instead.
    assert "app" not in meta["labels"]
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "warmscale"
    assert meta["labels"]["warmscale.io/role"] == "hot-sleeper"
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["ownerReferences"][0]["kind"] == "Deployment"
    c = spec["containers"][0]
    assert c["args"][-1] == "--enable-sleep-mode"
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in c["env"]
    assert {"name": "HF_HOME", "value": "/cache"} in c["env"]
    # The GPU comes from the shared claim alone.
    assert c["resources"] == {"limits": {"memory": "64Gi"}, "claims": [{"name": "hot-gpu"}]}
    assert spec["resourceClaims"] == [{"name": "hot-gpu", "resourceClaimName": "ws-hot-shared-abc"}]
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    ann = meta["annotations"]
    assert ann["kwok.x-k8s.io/ready-delay"] == "1s"
    assert (ann["warmscale.io/hot-model"], ann["warmscale.io/hot-port"], ann["warmscale.io/hot-device"]) == \
        ("llama-8b", "8001", "drv/n1/gpu-3")
    # The template is not changed in place.
    assert "resourceClaims" in wl.pod_spec and wl.pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]

    # What the waker reads back from it once it runs.
    running = {**pod, "spec": {**spec, "nodeName": "n1"}, "status": {"podIP": "127.0.0.9"}}
    s = sleeper_from_pod(running)
    assert s is not None
    assert (s.workload, s.index, s.base_url, s.model, s.device, s.gpu_product) == \
        (f"{NS}/llama", 1, "http://127.0.0.9:8001", "llama-8b", "drv/n1/gpu-3", "NVIDIA-H100")


def test_flags_already_there_are_not_repeated_and_sglang_gets_its_own() -> None:
    d = deployment({**ANN, "warmscale.io/engine": "sglang"})
    d["spec"]["template"]["spec"]["containers"][0]["args"] = ["--model-path", "Qwen/Qwen3-8B", "--enable-memory-saver"]
    wl = workload_from("Deployment", d)
    cfg = parse_hot(wl.annotations)
    assert cfg is not None
    pod = sleeper_pod(wl, cfg, SleeperTarget(Placement(f"{NS}/llama", 0, "n1", "d"), "c"))
    c = pod["spec"]["containers"][0]
    assert c["args"] == ["--model-path", "Qwen/Qwen3-8B", "--enable-memory-saver", "--enable-weights-cpu-backup"]
    assert all(e["name"] != "VLLM_SERVER_DEV_MODE" for e in c["env"])
    assert pod["metadata"]["annotations"]["warmscale.io/hot-model"] == "Qwen/Qwen3-8B"
    # SGLang cannot be asked its state: a new engine starts awake, recorded so for the waker (engine_state).
    assert pod["metadata"]["annotations"]["warmscale.io/hot-state"] == "awake@0"
    vllm = sleeper_pod(wl, replace(cfg, engine="vllm"), SleeperTarget(Placement(f"{NS}/llama", 0, "n1", "d"), "c"))
    assert "warmscale.io/hot-state" not in vllm["metadata"]["annotations"]  # vLLM has GET /is_sleeping


def test_a_time_sliced_sleeper_keeps_its_gpu_request_is_pinned_to_its_node_and_waits_for_dcgm() -> None:
    wl = workload_from("Deployment", deployment())
    cfg = parse_hot(wl.annotations)
    assert cfg is not None
    pod = sleeper_pod(wl, cfg, SleeperTarget(Placement(f"{NS}/llama", 0, "gpu-node-h100-07", "dcgm/GPU-x")))
    spec = pod["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == ["gpu-node-h100-07"]
    assert pod["metadata"]["annotations"]["warmscale.io/hot-device"] == DEVICE_FROM_DCGM
    running = {**pod, "spec": {**spec, "nodeName": "gpu-node-h100-07"}, "status": {"podIP": "127.0.0.9"}}
    # No attribution yet: not a sleeper (never woken: its GPU's budget could not be kept).
    assert sleeper_from_pod(running) is None
    assert sleeper_from_pod(running, lambda ns, name: None) is None
    s = sleeper_from_pod(running, lambda ns, name: "dcgm/GPU-x" if name == pod["metadata"]["name"] else None)
    assert s is not None and s.device == "dcgm/GPU-x"


def test_pool_gpus_are_the_pinnable_devices_the_slices_publish_on_the_pool_nodes() -> None:
    slices = [
        slice_("n1", [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-a"}},
                       "capacity": {"memory": {"value": "40Gi"}}},
                      {"name": "gpu-1", "attributes": {"productName": {"string": "no uuid"}}}]),
        slice_("n2", [{"name": "gpu-0", "attributes": {"gpu.warmscale.test/uuid": {"string": "GPU-b"}}}]),
        slice_("n3", [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-c"}}}]),  # not a pool node
        slice_("n1", [{"name": "nic-0", "attributes": {"uuid": {"string": "NIC"}}}], driver="nic.example.com"),
    ]
    devs = dra_devices(slices, ["n1", "n2"], "gpu.warmscale.test")
    assert [(d.node, d.name, d.uuid, d.hbm_gib) for d in devs] == [("n1", "gpu-0", "GPU-a", 40.0),
                                                                   ("n2", "gpu-0", "GPU-b", 80.0)]
    claim = shared_claim(NS, "shared", devs[0], "gpu.warmscale.test")
    assert claim["metadata"]["labels"]["warmscale.io/role"] == "hot-claim"
    assert "ownerReferences" not in claim["metadata"]
    req = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert req["deviceClassName"] == "gpu.warmscale.test"
    assert req["selectors"][0]["cel"]["expression"] == 'device.attributes["gpu.warmscale.test"].uuid == "GPU-a"'
    allocated = {"status": {"allocation": {"devices": {"results": [
        {"driver": "gpu.warmscale.test", "pool": "n1", "device": "gpu-0", "request": "gpu"}]}}}}
    assert claim_device(allocated) == devs[0].device and claim_device(claim) is None


def test_dcgm_attribution_from_the_sample_maps_each_single_gpu_pod_to_its_gpu() -> None:
    """GPUs 0-1: one vLLM pod with TP=2 (no single GPU: no sleeper); GPU 2: an SGLang pod; GPU 3 idle."""
    readings = attributions(parse_text((SAMPLES_DIR / "dcgm-load.prom").read_text()))
    att = dcgm_attribution(readings, ["gpu-node-h100-07"])
    assert len(att.gpus) == 4 and {g.node for g in att.gpus} == {"gpu-node-h100-07"}
    assert att.device_of("llm-serving", "sglang-qwen-32b-5d8b9c7f6-p7wlm") == \
        DCGM_PREFIX + "GPU-c03e5f7a-9d21-4e6b-8f40-2a1b3c4d5e6f"
    assert att.device_of("llm-serving", "vllm-llama-8b-7c9f6d5b8-kq2xz") is None
    assert dcgm_attribution(readings, ["another-node"]).gpus == ()


def test_dcgm_attribution_under_time_slicing_keeps_every_pod_of_a_shared_gpu() -> None:
    text = "\n".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-s",Hostname="n1",namespace="llm",pod="{p}"}} 0' for p in
        ("ws-hot-a-0", "ws-hot-b-0")) + '\nDCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-t",Hostname="n1"} 0\n'
    att = dcgm_attribution(attributions(parse_text(text)), ["n1"])
    assert att.device_of("llm", "ws-hot-a-0") == att.device_of("llm", "ws-hot-b-0") == "dcgm/GPU-s"
    assert [g.device for g in att.gpus] == ["dcgm/GPU-s", "dcgm/GPU-t"]


@pytest.mark.parametrize(("annotations", "key"), [
    ({**ANN, HOT_HOST_RAM: "lots"}, HOT_HOST_RAM),
])
def test_bad_hot_annotations_name_their_key(annotations: dict[str, str], key: str) -> None:
    with pytest.raises(AnnotationError) as exc:
        parse_hot(annotations)
    assert exc.value.key == key


def test_host_ram_defaults_by_level_and_pool_nodes_name_their_dra_driver() -> None:
    assert parse_hot(ANN).host_ram_gib == 22.0  # type: ignore[union-attr]
    assert parse_hot({**ANN, "warmscale.io/sleep-level": "2"}).host_ram_gib == 0.0  # type: ignore[union-attr]
    assert parse_hot({**ANN, HOT_HOST_RAM: "16Gi"}).host_ram_gib == 16.0  # type: ignore[union-attr]
    node = {"warmscale.io/hot-pool": "shared", "warmscale.io/hot-pool-host-ram": "512Gi"}
    cfg = parse_pool_node(node)
    assert cfg is not None and (cfg.dra_driver, cfg.device_class) == ("gpu.nvidia.com", "gpu.nvidia.com")
    cfg = parse_pool_node({**node, NODE_DRA_DRIVER: "gpu.warmscale.test"})
    assert cfg is not None and cfg.device_class == "gpu.warmscale.test"
    with pytest.raises(AnnotationError) as exc:
        parse_pool_node({**node, NODE_DRA_DRIVER: "Not A Driver"})
    assert exc.value.key == NODE_DRA_DRIVER


@pytest.mark.parametrize(("given", "watched"), [
    (None, ()), ("", ()), ("a", ("a",)), ("a,b", ("a", "b")), (" a , b ,a,", ("a", "b")), (["b", "a"], ("b", "a")),
])
def test_the_watched_namespaces_of_the_hot_pool(given: str | list[str] | None, watched: tuple[str, ...]) -> None:
    assert watched_namespaces(given) == watched
