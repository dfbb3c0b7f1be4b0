"""The one trace reader (demo and bench): what it accepts, and the file:line:column of what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmscale.traces import PACKAGE_DIR, shipped
from warmscale.traces.loader import TraceError, _fields, detect_kind, read_rates, read_requests


def test_fields_and_their_columns() -> None:
    assert _fields("0,10,5\n") == [("0", 1), ("10", 3), ("5", 6)]
    assert _fields('1,"2,5",3\r\n') == [("1", 1), ("2,5", 3), ("3", 9)]
    assert _fields('"a ""b""",c') == [('a "b"', 1), ("c", 11)]
    assert _fields("1,,") == [("1", 1), ("", 3), ("", 4)]


def test_column_order_extra_columns_blank_lines_and_crlf(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(b"output_tokens,extra,timestamp_s,input_tokens\r\n5,x,0,10\r\n\r\n7,y,1.5,20\r\n")
    assert detect_kind(p) == "requests"
    assert read_requests(p) == [(0.0, 10, 5), (1.5, 20, 7)]


def test_the_bad_field_is_pointed_at(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text('timestamp_s,input_tokens,output_tokens\n0,10,5\n\n1,"1,5",3\n')
    with pytest.raises(TraceError) as exc:
        read_requests(p)
    assert str(exc.value) == f"{p}:4:3: input_tokens: '1,5' is not a number"
    assert (exc.value.line, exc.value.column) == (4, 3)


def test_rate_curves(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text("bucket_start_s,bucket_end_s,rate_rps\n0,600,1.5\n600,1200,2\n")
    assert detect_kind(p) == "rate"
    r = read_rates(p)
    assert (r.start, r.end, r.value, r.column) == ([0.0, 600.0], [600.0, 1200.0], [1.5, 2.0], "rate_rps")


def test_every_shipped_trace_reads() -> None:
    for t in shipped():
        path = PACKAGE_DIR / t.file
        if t.kind == "requests":
            assert len(read_requests(path)) > 1000
        else:
            assert len(read_rates(path).start) > 10


def _gz(path: Path, text: str) -> Path:
    import gzip

    with gzip.open(path, "wt") as f:
        f.write(text)
    return path


def test_block_hashes_are_read_with_runs_and_checked_against_the_trace(tmp_path: Path) -> None:
    from warmscale.traces.loader import check_block_hashes, read_block_hashes

    p = _gz(tmp_path / "t.hashes.gz", "# block_tokens=512\n0-2\n0 3 7-8\n\n")
    h = read_block_hashes(p)
    assert h.block_tokens == 512 and h.ids == [(0, 1, 2), (0, 3, 7, 8), ()]
    check_block_hashes(h, [(0.0, 1025, 1), (1.0, 2048, 1), (2.0, 0, 1)], p)
    with pytest.raises(TraceError, match=r":3:1: 4 block ids for a prompt of 1536 tokens \(3 blocks of 512\)"):
        check_block_hashes(h, [(0.0, 1025, 1), (1.0, 1536, 1), (2.0, 0, 1)], p)
    with pytest.raises(TraceError, match="3 lines of block ids for 2 requests"):
        check_block_hashes(h, [(0.0, 1025, 1), (1.0, 2048, 1)], p)


@pytest.mark.parametrize(("text", "where", "what"), [
    ("0 1\n", ":1:1", "the first line must be # block_tokens=N"),
    ("# block_tokens=0\n1\n", ":1:16", "block_tokens: '0' is not a positive"),
    ("# block_tokens=16\n1 2\n3 x\n", ":3:3", "block id 'x' is not a whole number"),
    ("# block_tokens=16\n5-2\n", ":2:1", "block id range '5-2' is empty"),
])
def test_bad_block_hashes_are_pointed_at(tmp_path: Path, text: str, where: str, what: str) -> None:
    from warmscale.traces.loader import read_block_hashes

    p = _gz(tmp_path / "t.hashes.gz", text)
    with pytest.raises(TraceError) as exc:
        read_block_hashes(p)
    assert str(exc.value).startswith(f"{p}{where}: {what}")


def test_not_gzip_is_a_clear_error(tmp_path: Path) -> None:
    from warmscale.traces.loader import read_block_hashes

    p = tmp_path / "t.hashes.gz"
    p.write_text("# block_tokens=512\n")
    with pytest.raises(TraceError, match="cannot read the block hashes"):
        read_block_hashes(p)


def test_the_sidecar_is_found_beside_the_trace_or_in_the_package(tmp_path: Path) -> None:
    from warmscale.traces import hashes_for

    mine = tmp_path / "mine.csv"
    mine.write_text("timestamp_s,input_tokens,output_tokens\n0,1,1\n")
    assert hashes_for(mine) is None
    side = _gz(tmp_path / "mine.hashes.gz", "# block_tokens=512\n0\n")
    assert hashes_for(mine) == side
    # A shipped trace copied alone into a --traces folder takes the package's hashes.
    copy = tmp_path / "mooncake_fast25_conversation.csv"
    copy.write_text((PACKAGE_DIR / "mooncake_fast25_conversation.csv").read_text())
    assert hashes_for(copy) == PACKAGE_DIR / "mooncake_fast25_conversation.hashes.gz"
