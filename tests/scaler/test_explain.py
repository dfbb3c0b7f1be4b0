"""`warmscale explain` and the trace on /decisions, against a running in-process scaler."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from tests.scaler.conftest import ScriptedReader
from warmscale import explain
from warmscale.cli import main


async def _explain(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = await asyncio.to_thread(main, ["explain", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


async def test_explain_prints_every_step_of_the_last_decisions(make_server: Any, clients: Any,
                                                               capsys: pytest.CaptureFixture[str],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    reader = ScriptedReader(load=100.0, replicas=2)
    server = await make_server(reader)
    c = clients(server.grpc_port)
    caplog.set_level(logging.INFO, logger="warmscale.scaler.tracker")
    await c.poll(c.ref(name="chat", namespace="llm"))
    await asyncio.sleep(0.3)
    url = f"http://127.0.0.1:{server.metrics_port}"
    rc, out, _ = await _explain("llm/chat", "--scaler", url, capsys=capsys)
    assert rc == 0, out
    assert "desired 4" in out and "reason demand" in out
    for step in ("need", "confirm", "partial-data", "pd-ratio", "bounds", "hold", "state-lost", "landing"):
        assert f"  {step} " in out, (step, out)
    rc, out, _ = await _explain("llm/chat", "--scaler", url, "--json", "--last", "1", capsys=capsys)
    [entry] = json.loads(out)
    trace = entry["trace"]
    assert trace[0]["step"] == "need" and trace[0]["after"] == 4 and trace[0]["inputs"]["rule.demand"] == 4
    assert trace[-1]["step"] == "landing" and trace[-1]["after"] == entry["desired"] == 4
    # one structured line for the change of the desired count, naming the step that moved it
    changes = [r for r in caplog.records if r.getMessage() == "desired replicas changed"]
    assert changes and changes[-1].to == 4 and changes[-1].reason == "demand"  # type: ignore[attr-defined]
    assert any(s.startswith("need: None -> 4") for s in changes[-1].steps)  # type: ignore[attr-defined]
    # nothing for another ScaledObject: exit 1 with a hint
    rc, _, err = await _explain("llm/other", "--scaler", url, capsys=capsys)
    assert rc == 1 and "no decision for llm/other" in err


async def test_explain_names_an_unreadable_scaler(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = await _explain("llm/chat", "--scaler", "http://127.0.0.1:9", capsys=capsys)
    assert rc == 2 and "cannot read http://127.0.0.1:9/decisions" in err
    rc, _, err = await _explain("llm/chat", "--scaler", "ftp://x", capsys=capsys)
    assert rc == 2 and "--scaler" in err


@pytest.mark.parametrize("bad", ["chat", "/chat", "llm/", "a/b/c"])
def test_explain_names_a_bad_target(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["explain", bad])
    assert exc.value.code == 2 and "NAMESPACE/NAME" in capsys.readouterr().err


def test_format_says_when_another_replica_computed_it() -> None:
    text = explain.format_decisions([{"ts": 0, "desired": 2, "active": True, "reason": "demand", "trace": []}])
    assert "computed by another scaler replica" in text
