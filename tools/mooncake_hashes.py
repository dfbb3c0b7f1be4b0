"""Derive ``warmscale/traces/mooncake_fast25_conversation.hashes.gz`` from Mooncake's original trace.

Usage: ``python3 tools/mooncake_hashes.py ORIGINAL.jsonl [OUT.gz]``, where ORIGINAL is
github.com/kvcache-ai/Mooncake ``FAST25-release/traces/conversation_trace.jsonl`` at commit
3b5a594133958449a1feaf1c9e0fc1b553e34a28 (Apache-2.0, Qin et al., "Mooncake", FAST 2025).

The output keeps only each request's ``hash_ids`` (one id per 512-token block of its prompt, the last
block possibly partial; requests that share a leading id share that prefix), one line per request in
the trace's order, which is the order of ``mooncake_fast25_conversation.csv``'s data rows. A run of
consecutive ids ``a, a+1, ..., b`` is written ``a-b``; ids are separated by spaces. The first line is
``# block_tokens=512``. Read by :func:`warmscale.traces.loader.read_block_hashes`. The gzip header
carries no time stamp, so the output is byte-identical from one run to the next.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import sys
from pathlib import Path

# Mooncake's README (FAST25-release/traces): "hash_ids ... each block contains 512 tokens"; checked
# below on every row: len(hash_ids) == ceil(input_length / 512).
BLOCK_TOKENS = 512
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "warmscale" / "traces" / "mooncake_fast25_conversation.hashes.gz"


def runs(ids: list[int]) -> str:
    """``[0, 14, 15, 16]`` as ``"0 14-16"``."""
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if j == i else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return " ".join(out)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(argv[1])
    dst = Path(argv[2]) if len(argv) == 3 else DEFAULT_OUT
    lines = [f"# block_tokens={BLOCK_TOKENS}"]
    with src.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            ids = [int(x) for x in row["hash_ids"]]
            if len(ids) != math.ceil(int(row["input_length"]) / BLOCK_TOKENS):
                print(f"{src}:{number}: {len(ids)} hash_ids for {row['input_length']} tokens", file=sys.stderr)
                return 1
            lines.append(runs(ids))
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(("\n".join(lines) + "\n").encode())
    dst.write_bytes(buf.getvalue())
    print(f"{dst}: {len(lines) - 1} requests, {len(buf.getvalue())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
