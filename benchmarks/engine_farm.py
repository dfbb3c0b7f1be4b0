"""Many fake engine ``/metrics`` endpoints on loopback, in one process, as cheap as possible.

    python -m warmscale.benchmarks.engine_farm --count 1000 --payload small|realistic --ports-file FILE

Each endpoint is its own listening port on 127.0.0.1 answering every GET with the same static
payload (HTTP/1.1 keep-alive, a bare asyncio protocol: a few tens of microseconds per request, so
that the load generator does not eat the CPU the scaler is measured with). The chosen ports are
written to ``--ports-file`` (one a line) once all are listening. SIGTERM stops it.

Payloads (from ``../shared/reference/metrics-samples/vllm-v1-load.prom``):

- ``realistic``: ~15 kB — engine 0's gauges, counters and histogram sums/counts, the TTFT histogram
  and further histograms' buckets until ~15 kB (what one vLLM replica with a handful of histograms
  exposes);
- ``small``: ~1 kB — engine 0's request gauges and counters only.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import signal
import socket
from pathlib import Path

from warmscale.benchmarks.samples import SAMPLES_DIR

SAMPLES = SAMPLES_DIR  # shipped copies of shared/reference/metrics-samples (benchmarks/samples)
SMALL_FAMILIES = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                            "vllm:generation_tokens", "vllm:request_success", "vllm:num_preemptions"})
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)")


def _families(text: str) -> list[tuple[str, list[str]]]:
    """(family base name, lines) in payload order; comment lines go with the family they announce."""
    out: list[tuple[str, list[str]]] = []
    by: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("# HELP") or line.startswith("# TYPE"):
            base = line.split()[2]
        elif line.startswith("#") or not line.strip():
            continue
        else:
            m = _NAME.match(line)
            if not m:
                continue
            base = re.sub(r"_(bucket|sum|count|created|total)$", "", m.group(1))
        if base not in by:
            by[base] = []
            out.append((base, by[base]))
        by[base].append(line)
    return out


def payload(kind: str, target: int = 15_000) -> str:
    text = (SAMPLES / "vllm-v1-load.prom").read_text()
    keep = [ln for ln in text.splitlines() if 'engine="1"' not in ln]  # one engine per replica
    fams = _families("\n".join(keep) + "\n")
    head: list[str] = []
    buckets: list[list[str]] = []
    for base, lines in fams:
        if kind == "small" and base not in SMALL_FAMILIES:
            continue
        plain = [ln for ln in lines if "_bucket{" not in ln and "_created" not in ln
                 and not (kind == "small" and ln.startswith("# HELP"))]
        head.extend(plain)
        b = [ln for ln in lines if "_bucket{" in ln]
        if b and kind != "small":
            buckets.append(b) if "time_to_first_token" not in base else buckets.insert(0, b)
    out = list(head)
    size = sum(len(x) + 1 for x in out)
    for b in buckets:
        extra = sum(len(x) + 1 for x in b)
        if size + extra > target and size > target * 0.6:
            break
        out.extend(b)
        size += extra
    return "\n".join(out) + "\n"


def _publish(path: Path, ports: list[int]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(map(str, ports)) + "\n")
    tmp.rename(path)


class _Engine(asyncio.Protocol):
    def __init__(self, response: bytes) -> None:
        self.response = response
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\r\n\r\n" in self.buf:
            _, self.buf = self.buf.split(b"\r\n\r\n", 1)
            assert self.transport is not None
            self.transport.write(self.response)


async def serve(count: int, kind: str, ports_file: Path) -> None:
    body = payload(kind).encode()
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    loop = asyncio.get_running_loop()
    servers = []
    ports = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        ports.append(sock.getsockname()[1])
        servers.append(await loop.create_server(lambda: _Engine(response), sock=sock))
    _publish(ports_file, ports)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--payload", choices=["small", "realistic"], default="realistic")
    ap.add_argument("--ports-file", type=Path, required=True)
    ap.add_argument("--print-payload", action="store_true")
    args = ap.parse_args()
    if args.print_payload:
        print(payload(args.payload), end="")
        return
    asyncio.run(serve(args.count, args.payload, args.ports_file))


if __name__ == "__main__":
    main()
