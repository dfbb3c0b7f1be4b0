"""The admission webhook's pure decision and patch, and its HTTPS server with a generated certificate."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from warmscale.warmpool import objects as ob
from warmscale.warmpool.model_uri import CacheKey, parse_model_uri, staged_label_key
from warmscale.warmpool.webhook import affinity_patch, review_response, self_signed, serve, staged_key_for

URI = "hf://org/model@rev1"
KEY = staged_label_key(CacheKey(parse_model_uri(URI), "ns"))  # the pods' namespace
P = "warmscale.io/"


def wl(ann: dict[str, str], sel: dict[str, str] | None = None, deleting: bool = False) -> dict[str, Any]:
    m: dict[str, Any] = {"name": "llm", "annotations": ann}
    if deleting:
        m["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    return {"metadata": m, "spec": {"selector": {"matchLabels": sel or {"app": "llm"}}}}


ON = {P + "enabled": "true", P + "prestage-nodes": "2", P + "model-uri": URI}


def pod(labels: dict[str, str] | None = None, affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"metadata": {"generateName": "llm-", "namespace": "ns",
                         "labels": labels or {"app": "llm", "pod-template-hash": "h"}}, "spec": spec}


def test_which_pods_get_the_preference() -> None:
    assert staged_key_for(pod(), [wl(ON)]) == KEY
    assert staged_key_for(pod({"app": "other"}), [wl(ON)]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "enabled": "false"})]) is None
    assert staged_key_for(pod(), [wl(ON, deleting=True)]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "prestage-nodes": "0"})]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "standby": "lots"})]) is None  # invalid: changes nothing
    managed = pod({"app": "llm", ob.MANAGED_BY: ob.MANAGED_BY_VALUE})
    assert staged_key_for(managed, [wl(ON)]) is None


def test_leaderworkerset_group_pods_get_the_preference() -> None:
    """Every pod of an enabled LeaderWorkerSet's groups (its name label; LWS has no spec.selector) prefers
    the staged nodes and loads the staged copy, the leader and the workers alike."""
    lws = {"kind": ob.LWS_KIND, "metadata": {"name": "pp", "annotations": ON}, "spec": {}}
    for worker in ("0", "1"):
        member = pod({ob.LWS_NAME_LABEL: "pp", ob.LWS_GROUP_INDEX: "0", ob.LWS_WORKER_INDEX: worker})
        assert staged_key_for(member, [lws]) == KEY
    assert staged_key_for(pod({ob.LWS_NAME_LABEL: "other"}), [lws]) is None


def _apply(p: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(p)
    for op in patch:
        parts = op["path"].strip("/").split("/")
        cur: Any = out
        for k in parts[:-1]:
            cur = cur[k]
        if parts[-1] == "-":
            cur.append(op["value"])
        else:
            cur[parts[-1]] = op["value"]
    return out


def test_patch_keeps_existing_affinity_and_is_idempotent() -> None:
    req = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "a", "operator": "Exists"}]}]}}
    other = {"weight": 5, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}
    affs: list[dict[str, Any] | None] = [None, {"podAntiAffinity": {}}, {"nodeAffinity": req},
             {"nodeAffinity": {**req, "preferredDuringSchedulingIgnoredDuringExecution": [other]}}]
    for aff in affs:
        p = pod(affinity=aff)
        out = _apply(p, affinity_patch(p, KEY))
        na = out["spec"]["affinity"]["nodeAffinity"]
        prefs = na["preferredDuringSchedulingIgnoredDuringExecution"]
        assert prefs[-1] == {"weight": 100, "preference": {"matchExpressions": [
            {"key": KEY, "operator": "In", "values": ["true"]}]}}
        if aff and "nodeAffinity" in aff:
            required = "requiredDuringSchedulingIgnoredDuringExecution"
            assert na[required] == req[required]
        if aff and "podAntiAffinity" in aff:
            assert out["spec"]["affinity"]["podAntiAffinity"] == {}
        assert affinity_patch(out, KEY) == []


def test_review_response_shape() -> None:
    review: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "ns", "object": pod()}}
    out = review_response(review, [wl(ON)])
    r = out["response"]
    assert r["uid"] == "u1" and r["allowed"] and r["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(r["patch"]))[0]["path"] == "/spec/affinity"
    upd = review_response({**review, "request": {**review["request"], "operation": "UPDATE"}}, [wl(ON)])
    assert upd["response"] == {"uid": "u1", "allowed": True}


async def test_https_server_with_self_signed_cert(tmp_path: Path) -> None:
    cert, key, ca = self_signed(["127.0.0.1", "localhost"], tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def lister(ns: str) -> list[dict[str, Any]]:
        assert ns == "ns"
        return [wl(ON)]

    runner = await serve(lister, port, str(cert), str(key), host="127.0.0.1")
    try:
        ctx = ssl.create_default_context(cadata=ca.decode())
        review = {"request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": "ns",
                              "object": pod()}}
        async with aiohttp.ClientSession() as http, http.post(f"https://127.0.0.1:{port}/mutate", json=review,
                                                               ssl=ctx) as resp:
            body = await resp.json()
        assert body["response"]["patchType"] == "JSONPatch"
    finally:
        await runner.cleanup()


IMAGE = "registry.example/warmscale:0.1.0"


def _jsonpatch(p: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add/replace as the API server applies them (index insertion included)."""
    import copy

    out = copy.deepcopy(p)
    for op in patch:
        parts = op["path"].strip("/").split("/")
        cur: Any = out
        for k in parts[:-1]:
            cur = cur[int(k)] if isinstance(cur, list) else cur[k]
        last = parts[-1]
        if isinstance(cur, list):
            if last == "-":
                cur.append(op["value"])
            elif op["op"] == "add":
                cur.insert(int(last), op["value"])
            else:
                cur[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in cur
            cur[last] = op["value"]
    return out


def test_engine_pod_loads_the_staged_copy() -> None:
    """The pod gets the cache volume, WARMSCALE_MODEL_PATH (replacing the template's fallback), a
    read-only mount at the cache root and the ensure-mode init container first."""
    from warmscale.warmpool.annotations import parse_annotations
    from warmscale.warmpool.model_uri import cache_dir
    from warmscale.warmpool.webhook import ENSURE_CONTAINER, MODEL_PATH_ENV, engine_patch, model_path

    ann = {**ON, P + "model-size": "16Gi", P + "cache-root": "/var/lib/warmscale/models"}
    cfg = parse_annotations(ann)
    path = model_path(cfg, "ns")
    assert path == cache_dir("/var/lib/warmscale/models", CacheKey(parse_model_uri(URI), "ns")) + "/data"
    p = pod()
    p["spec"]["containers"] = [
        {"name": "engine", "image": "vllm", "args": ["--model=$(WARMSCALE_MODEL_PATH)"],
         "env": [{"name": "HF_TOKEN", "value": "x"}, {"name": MODEL_PATH_ENV, "value": "org/model"}]},
        {"name": "sidecar", "image": "s", "volumeMounts": [{"name": "mine", "mountPath": "/var/lib/warmscale/models"}]},
    ]
    p["spec"]["initContainers"] = [{"name": "other-init", "image": "i"}]
    p["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    out = _jsonpatch(p, engine_patch(p, cfg, IMAGE))
    spec = out["spec"]
    assert {"name": "warmscale-model-cache", "hostPath": {"path": "/var/lib/warmscale/models",
                                                          "type": "DirectoryOrCreate"}} in spec["volumes"]
    engine, sidecar = spec["containers"]
    assert {"name": MODEL_PATH_ENV, "value": path} in engine["env"] and len(engine["env"]) == 2
    assert engine["volumeMounts"] == [{"name": "warmscale-model-cache", "mountPath": "/var/lib/warmscale/models",
                                       "readOnly": True}]
    assert sidecar["volumeMounts"] == [{"name": "mine", "mountPath": "/var/lib/warmscale/models"}]  # no clash
    assert {"name": MODEL_PATH_ENV, "value": path} in sidecar["env"]
    init = spec["initContainers"][0]
    assert init["name"] == ENSURE_CONTAINER and spec["initContainers"][1]["name"] == "other-init"
    assert init["image"] == IMAGE
    cmd = init["command"]
    assert cmd[:4] == ["warmscale", "--log-format", "json", "stage"] and "--ensure" in cmd
    assert cmd[cmd.index("--cache-root") + 1] == "/var/lib/warmscale/models"
    assert cmd[cmd.index("--size") + 1] == str(16 * 1024**3)
    assert init["volumeMounts"][0] == {"name": "warmscale-model-cache", "mountPath": "/var/lib/warmscale/models"}
    sc = init["securityContext"]  # can write the root-owned hostPath, and nothing else
    assert sc["runAsUser"] == 0 and sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False
    assert engine_patch(out, cfg, IMAGE) == []  # idempotent


def test_review_mutates_for_the_engine_only_with_an_image_and_a_model() -> None:
    review: dict[str, Any] = {"request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE",
                                          "namespace": "ns", "object": pod()}}

    def ops(workloads: list[dict[str, Any]], image: str | None) -> list[str]:
        r = review_response(review, workloads, image)["response"]
        return [o["path"] for o in json.loads(base64.b64decode(r["patch"]))] if "patch" in r else []

    assert ops([wl(ON)], None) == ["/spec/affinity"]
    with_engine = ops([wl(ON)], IMAGE)
    assert "/spec/affinity" in with_engine and "/spec/initContainers" in with_engine
    # no pre-staging (prestage-nodes 0): no affinity, but the engine still loads the (ensured) copy
    assert "/spec/affinity" not in ops([wl({**ON, P + "prestage-nodes": "0"})], IMAGE)
    assert "/spec/initContainers" in ops([wl({**ON, P + "prestage-nodes": "0"})], IMAGE)
    no_model = {P + "enabled": "true", P + "min-ready": "1"}
    assert ops([wl(no_model)], IMAGE) == []
