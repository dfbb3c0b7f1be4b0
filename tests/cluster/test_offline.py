"""Checks of the harness that need no cluster (fleet manifests, PKI, stage files)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from . import pki
from .fleet import GPU_RESOURCE, default_fleet, gpu_fleet
from .harness import KWOK_CONFIG, STAGES_DIR


def test_default_fleet_manifests() -> None:
    pools = {p.name: p for p in default_fleet(per_pool=3, overrides={"l4": 0})}
    assert set(pools) == {"h100", "a100", "cpu"}
    node = pools["h100"].manifest(0)
    labels = node["metadata"]["labels"]
    assert labels["type"] == "kwok"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8" == node["status"]["capacity"][GPU_RESOURCE]
    assert node["spec"]["taints"] == [{"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}]
    cpu = pools["cpu"].manifest(2)
    assert cpu["metadata"]["name"] == "kwok-cpu-2"
    assert GPU_RESOURCE not in cpu["status"]["capacity"] and "taints" not in cpu["spec"]
    assert len(gpu_fleet(1000)[0].manifests()) == 1000
    with pytest.raises(ValueError, match="unknown pool"):
        default_fleet(overrides={"tpu": 1})


def test_pki(tmp_path: Path) -> None:
    files = pki.generate(tmp_path)
    ca = x509.load_pem_x509_certificate(files.ca.cert.read_bytes())
    admin = x509.load_pem_x509_certificate(files.admin.cert.read_bytes())
    serving = x509.load_pem_x509_certificate(files.serving.cert.read_bytes())
    admin.verify_directly_issued_by(ca)
    serving.verify_directly_issued_by(ca)
    org = admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in org] == ["system:masters"]
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert files.sa_private_key.stat().st_mode & 0o077 == 0


def test_stage_files() -> None:
    stages = {}
    for path in sorted(STAGES_DIR.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and doc["kind"] == "Stage"
        stages[doc["metadata"]["name"]] = doc["spec"]
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-start",
        "pod-ready",
        "pod-complete",
        "pod-delete",
    }
    annotations = {
        "pod-start": "sim.warmscale.io/start-delay",
        "pod-ready": "sim.warmscale.io/ready-delay",
        "pod-complete": "sim.warmscale.io/job-duration",
    }
    for name, annotation in annotations.items():
        expression = stages[name]["delay"]["durationFrom"]["jq"]["expression"]
        assert annotation in expression
    assert stages["pod-delete"]["next"] == {"finalizers": {"empty": True}, "delete": True}
    assert yaml.safe_load(KWOK_CONFIG.read_text())["kind"] == "KwokConfiguration"
