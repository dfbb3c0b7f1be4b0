"""The admission webhook's pure decision and patch, and its HTTPS server with a generated certificate."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp

from warmpool import objects as ob
from warmpool.model_uri import parse_model_uri, staged_label_key
from warmpool.webhook import affinity_patch, review_response, self_signed, serve, staged_key_for

URI = "hf://org/model@rev1"
KEY = staged_label_key(parse_model_uri(URI))
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
    return {"metadata": {"generateName": "llm-", "labels": labels or {"app": "llm", "pod-template-hash": "h"}},
            "spec": spec}


def test_which_pods_get_the_preference() -> None:
    assert staged_key_for(pod(), [wl(ON)]) == KEY
    assert staged_key_for(pod({"app": "other"}), [wl(ON)]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "enabled": "false"})]) is None
    assert staged_key_for(pod(), [wl(ON, deleting=True)]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "prestage-nodes": "0"})]) is None
    assert staged_key_for(pod(), [wl({**ON, P + "standby": "lots"})]) is None  # invalid: changes nothing
    managed = pod({"app": "llm", ob.MANAGED_BY: ob.MANAGED_BY_VALUE})
    assert staged_key_for(managed, [wl(ON)]) is None


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
