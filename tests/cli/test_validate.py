"""`warmscale validate -f FILE`: the scaler's and the controller's parsers, offline, every bad key with
its file:line:column, value, range and a did-you-mean; KEDA's bounds against warmscale's."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from warmscale.cli import main

REPO = Path(__file__).resolve().parents[2]

SCALED_OBJECT = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: llama
  namespace: llm
spec:
  scaleTargetRef:
    name: llama
  minReplicaCount: 1
  maxReplicaCount: {keda_max}
  triggers:
    - type: external-push
      metadata:
        scalerAddress: warmscale.warmscale.svc:9090
        podSelector: app=llama
        minReplicas: "1"
        maxReplicas: "{max}"
{extra}"""


def _write(tmp_path: Path, text: str, name: str = "so.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    rc = main(["validate", *args])
    out = capsys.readouterr()
    return rc, [x for x in out.out.splitlines() if x], out.err


def _so(keda_max: int = 8, max_: str = "8", extra: str = "") -> str:
    return SCALED_OBJECT.format(keda_max=keda_max, max=max_, extra=textwrap.indent(extra, " " * 8))


def test_a_good_scaled_object_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines, err = _run(capsys, "-f", str(_write(tmp_path, _so())))
    assert (rc, lines) == (0, [])
    assert "0 error(s), 0 warning(s) in 1 object(s)" in err


def test_out_of_range_names_file_line_column_key_value_and_range(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _so(max_="99999", keda_max=99999))
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 1
    [line] = [x for x in lines if "error" in x]
    assert line.startswith(f"{path}:17:22: error: ScaledObject llm/llama: spec.triggers[0].metadata.maxReplicas")
    assert "'99999'" in line and "[1, 10_000]" in line


def test_unknown_key_gets_a_suggestion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _so(extra='targetInflightPerReplca: "4"\n'))
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 1
    [line] = lines
    assert line.startswith(f"{path}:18:9: error:")  # the key itself
    assert "unknown metadata key; did you mean targetInflightPerReplica?" in line


def test_every_bad_key_is_reported_not_only_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _so(extra='ttftSloSeconds: "fast"\nttftQuantile: "2"\nburstConfirmSecond: "5"\n'))
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 1
    keys = [line.split(": ")[3].split(" = ")[0] for line in lines]
    assert keys == ["spec.triggers[0].metadata.ttftSloSeconds", "spec.triggers[0].metadata.ttftQuantile",
                    "spec.triggers[0].metadata.burstConfirmSecond"]
    assert "range (0, 1)" in lines[1] or "(0, 1)" in lines[1]


def test_an_unquoted_number_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines, _ = _run(capsys, "-f", str(_write(tmp_path, _so(extra="hpaTolerance: 0\n"))))
    assert rc == 1
    assert 'values must be strings: quote it (hpaTolerance: "0")' in lines[0]


def test_a_consistency_error_names_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = _so(max_="1").replace('minReplicas: "1"', 'minReplicas: "3"')
    rc, lines, _ = _run(capsys, "-f", str(_write(tmp_path, text)))
    assert rc == 1
    [line] = lines  # no bounds warning from a trigger the scaler would refuse
    assert "metadata.maxReplicas = '1': 1 is below minReplicas 3" in line


def test_keda_bounds_that_disagree_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _so(keda_max=20))
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 0  # a warning only
    [line] = lines
    assert line.startswith(f"{path}:10:20: warning: ScaledObject llm/llama: spec.maxReplicaCount = '20'")
    assert "maxReplicas 8" in line
    rc, _, _ = _run(capsys, "--strict", "-f", str(path))
    assert rc == 1


def test_annotated_workloads_and_their_trigger_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: llama
  namespace: llm
  annotations:
    other.io/x: "1"
    warmscale.io/enabled: "true"
    warmscale.io/standby: "-3"
    warmscale.io/min-redy: "2"
    warmscale.io/trigger-metadata: '{"ttftQuantile": "2"}'
spec: {}
"""
    path = _write(tmp_path, text)
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 1
    assert len(lines) == 3
    assert lines[0].startswith(f"{path}:9:27: error: StatefulSet llm/llama: metadata.annotations[warmscale.io/standby]"
                               " = '-3'")
    assert lines[1].startswith(f"{path}:10:5: error:") and "did you mean warmscale.io/min-ready?" in lines[1]
    assert "[warmscale.io/trigger-metadata].ttftQuantile = '2'" in lines[2]


def test_multi_document_files_directories_and_other_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    _write(tmp_path, other + "---\n" + _so() + "---\n" + _so(max_="0"), "a.yaml")
    _write(tmp_path, "kind: List\nitems:\n- " + _so(max_="0").replace("\n", "\n  ").rstrip() + "\n", "b.yml")
    rc, lines, err = _run(capsys, "-f", str(tmp_path))
    assert rc == 1
    assert len(lines) == 2 and all("maxReplicas = '0'" in x for x in lines)
    assert lines[0].startswith(str(tmp_path / "a.yaml") + ":")
    assert lines[1].startswith(str(tmp_path / "b.yml") + ":")
    assert "in 3 object(s) checked, 2 file(s)" in err


def test_bad_yaml_and_missing_files_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, "a: [\n", "bad.yaml")
    rc, _, err = _run(capsys, "-f", str(bad))
    assert rc == 2 and err.startswith(f"warmscale validate: {bad}:2:1: not valid YAML")
    rc, _, err = _run(capsys, "-f", str(tmp_path / "missing.yaml"))
    assert rc == 2 and "missing.yaml: no such file" in err


def test_the_shipped_examples_validate() -> None:
    assert main(["validate", "--quiet", "-f", str(REPO / "manifests" / "examples")]) == 0


def test_a_removed_key_is_a_warning_naming_its_replacement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _so(extra='scaleUpMaxStep: "4"\n'))
    rc, lines, _ = _run(capsys, "-f", str(path))
    assert rc == 0
    [line] = lines
    assert line.startswith(f"{path}:18:9: warning:")
    assert "removed metadata key, ignored; no key: one decision at most multiplies the replicas by 2" in line
