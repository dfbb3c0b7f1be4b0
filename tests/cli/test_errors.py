"""Bad input on the command line: one line naming the flag or the file:line:column, exit 2, no
traceback, nothing run. One case per message."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmscale.cli import main

HEADER = "timestamp_s,input_tokens,output_tokens\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the demo's log file and any output land here
    monkeypatch.delenv("WARMSCALE_SHARED", raising=False)
    return tmp_path


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the command; it must exit 2 with one message and no traceback. Returns stderr."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    return err


def _csv(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- flag values, checked before anything runs ------------------------------------------------------
FLAG_CASES = [
    (["demo", "--speed", "0"], "argument --speed: must be greater than 0 (got 0)"),
    (["demo", "--speed", "-1"], "argument --speed: must be greater than 0 (got -1)"),
    (["demo", "--speed", "fast"], "argument --speed: 'fast' is not a number"),
    (["demo", "--speed", "nan"], "argument --speed: 'nan' is not a finite number"),
    (["demo", "--standby", "-3"], "argument --standby: must be 0 or more (got -3)"),
    (["demo", "--standby", "2.5"], "argument --standby: '2.5' is not an integer"),
    (["demo", "--log-level", "verbose"], "argument --log-level: 'verbose' is not a log level"),
    (["--log-level", "verbose", "demo"], "argument --log-level: 'verbose' is not a log level"),
    (["demo", "--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    (["demo", "--plot", "/nonexistent-dir/demo.png"], "argument --plot: /nonexistent-dir/demo.png: no such directory"),
    (["bench", "trace", "--ensemble", "0"], "argument --ensemble: must be at least 1 (got 0)"),
    (["bench", "trace", "--warmscale-meta", "burstConfirmSeconds"],
     "argument --warmscale-meta: expected KEY=VALUE, got 'burstConfirmSeconds'"),
    (["bench", "trace", "--slo-ttft", "0"], "argument --slo-ttft: must be greater than 0 (got 0)"),
    (["bench", "pd", "--kv-gbps", "-5"], "argument --kv-gbps: must be greater than 0 (got -5)"),
    (["bench", "suite", "--ensemble", "0"], "argument --ensemble: must be at least 1 (got 0)"),
    (["scaler", "--metrics-port", "70000"], "argument --metrics-port: must be a port 0-65535, or -1 for none"),
    (["scaler", "--grpc-port", "-1"], "argument --grpc-port: must be a port 0-65535 (got -1)"),
    (["scaler", "--tls-cert", "/nonexistent/cert.pem"], "argument --tls-cert: /nonexistent/cert.pem: no such file"),
    (["scaler", "--max-trackers", "0"], "argument --max-trackers: must be at least 1 (got 0)"),
    (["warmpool", "--kubeconfig", "/nonexistent/kubeconfig"],
     "argument --kubeconfig: /nonexistent/kubeconfig: no such file"),
    (["warmpool", "--resync", "0"], "argument --resync: must be greater than 0 (got 0)"),
    (["scaler", "--max-streams", "0"], "argument --max-streams: must be at least 1 (got 0)"),
    (["scaler", "--parse-worker-memory-bytes", "-1"], "argument --parse-worker-memory-bytes: must be 0 or more"),
    (["stage", "--uri", "ftp://x/y", "--cache-root", "/tmp/c"], "argument --uri: "),
    (["stage", "--uri", "hf://org/m", "--cache-root", "/tmp/c", "--size", "lots"], "argument --size: "),
    (["stage", "--uri", "hf://org/m", "--cache-root", "/tmp/c", "--size", "0"], "argument --size: expected a positive"),
    (["stage", "--uri", "hf://org/m", "--cache-root", "/tmp/c", "--budget", "-1Gi"], "argument --budget: "),
    (["stage", "--uri", "hf://org/m", "--cache-root", "/tmp/c", "--sha256", "abc"],
     "argument --sha256: expected 64 hex digits, got 'abc'"),
    (["stage", "--uri", "hf://org/m", "--cache-root", "/tmp/c", "--deadline", "0"],
     "argument --deadline: expected a positive number of seconds, got '0'"),
]


@pytest.mark.parametrize(("argv", "message"), FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_bad_flag_values(argv: list[str], message: str, here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _err(capsys, argv)


def test_speed_too_high_blames_the_speed(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _err(capsys, ["demo", "--speed", "1e7", "--plot", "", "--quiet"])
    # The first key the speed puts out of range: the capacity prior (a rate, times the speed).
    assert err.startswith("warmscale demo: --speed 1e+07: gives prefillTpsPrior")


def test_flag_combinations(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _err(capsys, ["demo", "--initial", "9", "--max-replicas", "8"]) == \
        "warmscale demo: --initial 9 is above --max-replicas 8\n"
    assert _err(capsys, ["warmpool", "--renew-period", "20"]).splitlines()[-1] == \
        "warmscale warmpool: --renew-period 20 must be less than --lease-duration 15"
    assert "--policies: unknown policy 'warmscal'" in _err(capsys, ["bench", "trace", "--policies", "warmscal"])
    assert "did you mean warmscale?" in _err(capsys, ["bench", "trace", "--policies", "warmscal"])
    assert _err(capsys, ["bench", "trace", "--warmscale-meta", "burstConfirmSecond=5"]) == \
        ("warmscale bench trace: --warmscale-meta burstConfirmSecond=5: unknown metadata key; "
         "did you mean burstConfirmSeconds?\n")
    assert "--decode-meta decodePerPrefillMin=-1: value '-1' is out of range" in \
        _err(capsys, ["bench", "pd", "--decode-meta", "decodePerPrefillMin=-1"])


# --- trace files: file:line:column, the same loader for the demo and every bench --------------------
TRACE_CASES = [
    (HEADER + "0,10,5\n1.5,3\n", ":3:6: short row: 2 of 3 fields, no output_tokens"),
    (HEADER + "0,10,5\n1.5,abc,3\n", ":3:5: input_tokens: 'abc' is not a number"),
    (HEADER + "0,10,5\n-1,10,3\n", ":3:1: timestamp_s: -1 is negative"),
    (HEADER + "0,10,5\ninf,10,3\n", ":3:1: timestamp_s: 'inf' is not a finite number"),
    (HEADER + "0,10,5\n1,10,2.5\n", ":3:6: output_tokens: 2.5 is not a whole number of tokens"),
    (HEADER + "0,10,5\n1,,3\n", ":3:3: input_tokens: '' is not a number"),
    (HEADER, ":2:1: no data rows after the header"),
    ("", ":1:1: empty file"),
    ("time,in,out\n0,1,1\n", ":1:1: unknown trace header time,in,out"),
]


@pytest.mark.parametrize("command", [["demo"], ["bench", "trace"], ["bench", "pd"]], ids=" ".join)
@pytest.mark.parametrize(("text", "message"), TRACE_CASES, ids=[m.split(": ", 1)[-1] for _, m in TRACE_CASES])
def test_malformed_traces(command: list[str], text: str, message: str, here: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(here / "t.csv", text)
    err = _err(capsys, [*command, "--trace", path])
    assert err.startswith(f"warmscale {' '.join(command)}: {path}{message}") and err.count("\n") == 1


def test_a_rate_curve_with_an_empty_bucket(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(here / "r.csv", "bucket_start_s,bucket_end_s,requests\n0,10,5\n\n10,10,3\n")
    err = _err(capsys, ["bench", "trace", "--trace", path, "--tokens-from", "azure-code"])
    assert err == f"warmscale bench trace: {path}:4:1: bucket_end_s 10 is not after bucket_start_s 10\n"


def test_the_demo_wants_a_per_request_trace(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _err(capsys, ["demo", "--trace", "servegen-deepseek-r1"])
    assert "servegen_reason_deepseek-r1_rate_600s.csv:1:1: the demo replays a per-request trace" in err


def test_tokens_from_must_be_a_per_request_trace(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _err(capsys, ["bench", "trace", "--trace", "servegen-deepseek-r1", "--tokens-from", "servegen-deepseek-r1"])
    assert ":1:1: the token sizes of a rate curve come from a per-request trace" in err


def test_unknown_and_unreadable_traces(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "'azure-cod' is neither a file nor a known trace" in _err(capsys, ["demo", "--trace", "azure-cod"])
    assert "missing.csv: no such trace file" in _err(capsys, ["bench", "trace", "--trace", "missing.csv"])
    binary = here / "b.csv"
    binary.write_bytes(b"timestamp_s,input_tokens,output_tokens\n\xff\xfe,1,1\n")
    assert f"{binary}: not a text (UTF-8) file" in _err(capsys, ["demo", "--trace", str(binary)])


def test_scaler_allow_targets(tmp_path: Path) -> None:
    """The scaler process exits 2 naming the flag (run as a process: it leaves through os._exit)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "warmscale", "scaler", "--allow-targets", "10.0.0.0/33",
                           "--no-kubernetes", "--metrics-port", "-1", "--grpc-port", "0"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo), "HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert "warmscale scaler: --allow-targets: '10.0.0.0/33' is neither a CIDR" in proc.stderr
    assert "Traceback" not in proc.stderr
