"""The traces that ship inside the package, and where every command finds a trace.

A trace argument (``warmscale demo --trace``, ``warmscale bench trace --trace``) is a file path or a
name from :data:`TRACES` (``azure-code``, ``azure-conv``, ``mooncake-conv``, ...; the file name or its
stem works too). A name is looked up, in order, in an explicit folder (``--traces DIR``), in
``$WARMSCALE_SHARED/traces`` when that variable is set, then in this package. Nothing here assumes
a folder beside the repository. Source and licence of each shipped file: ``README.md`` next to this
module, and :attr:`Trace.source` / :attr:`Trace.licence`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from warmscale.traces import loader

PACKAGE_DIR = Path(__file__).resolve().parent
ENV_VAR = "WARMSCALE_SHARED"

_AZURE_2023 = ("github.com/Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{}.csv at commit "
               "b469a113cedca53ddc3bdea71a143dc4b7d8700c; timestamps made relative to the first request. "
               "Patel et al., \"Splitwise\", ISCA 2024")
_CC_BY = "CC-BY-4.0 (https://creativecommons.org/licenses/by/4.0/)"
_APACHE = "Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)"
_WHERE_SHARED = ("it is not shipped in the package (too large); put it in a folder and pass --traces DIR "
                 f"or set {ENV_VAR} (the file is read from $" + ENV_VAR + "/traces); its source is in "
                 "the package's traces/README.md")


@dataclass(frozen=True)
class Trace:
    name: str
    file: str
    kind: str  # "requests" (timestamp_s,input_tokens,output_tokens) | "rate" (bucketed arrival rates)
    shipped: bool
    source: str
    licence: str
    note: str = ""


TRACES: dict[str, Trace] = {t.name: t for t in (
    Trace("azure-code", "azure_llm_2023_code.csv", "requests", True, _AZURE_2023.format("code"), _CC_BY,
          "Azure LLM inference, coding service, 1 h of 2023-11-16: 8,819 requests in on/off bursts"),
    Trace("azure-conv", "azure_llm_2023_conv.csv", "requests", True, _AZURE_2023.format("conv"), _CC_BY,
          "Azure LLM inference, conversation service, 1 h of 2023-11-16: 19,366 requests"),
    Trace("mooncake-conv", "mooncake_fast25_conversation.csv", "requests", True,
          "github.com/kvcache-ai/Mooncake, FAST25-release/traces/conversation_trace.jsonl at commit "
          "3b5a594133958449a1feaf1c9e0fc1b553e34a28; converted to CSV, timestamps in seconds; hash_ids in "
          "mooncake_fast25_conversation.hashes.gz (tools/mooncake_hashes.py). "
          "Qin et al., \"Mooncake\", FAST 2025", _APACHE,
          "Kimi (Moonshot AI) conversation workload, 1 h: 12,031 long-context requests"),
    Trace("servegen-deepseek-r1", "servegen_reason_deepseek-r1_rate_600s.csv", "rate", True,
          "github.com/alibaba/ServeGen, data/reason/deepseek-r1/chunk-*-trace.csv at commit "
          "f891d1189eb32b3868dfc443800c4150548c282a; per-client rates summed per 10-min window. "
          "Xiang et al., \"ServeGen\", arXiv 2505.09999", _APACHE,
          "Alibaba Model Studio, DeepSeek-R1 arrival rate per 10 min over one day"),
    Trace("azure-2024-conv-week", "azure_llm_2024_conv_rate_10s.csv", "rate", False,
          "Azure LLM inference 2024 (conversation, one week; AzurePublicDataset, AzureLLMInferenceDataset2024.md), "
          "counted per 10 s by github.com/cybsbbb/LLM_energy_optimization_rl "
          "(data/llm_inference_trace/processed/2024/invocations_ten_second_Conversation.csv). "
          "Stojkovic et al., \"DynamoLLM\", HPCA 2025", _CC_BY,
          "1 MB rate curve: requests per 10 s for 7 days"),
    Trace("azure-2024-code-week", "azure_llm_2024_code_rate_10s.csv", "rate", False,
          "as azure-2024-conv-week, coding service (invocations_ten_second_Coding.csv)", _CC_BY,
          "1 MB rate curve: requests per 10 s for 7 days"),
)}


class TraceNotFound(FileNotFoundError):
    """A trace name or path that resolves to no file; the message says where it looked."""


def _lookup(key: str) -> Trace | None:
    k = key.strip().lower()
    for t in TRACES.values():
        if k in (t.name, t.file.lower(), t.file.lower().removesuffix(".csv")):
            return t
    return None


def search_dirs(traces_dir: str | Path | None = None) -> list[Path]:
    """Where a trace name is looked up, first hit wins: ``traces_dir``, ``$WARMSCALE_SHARED/traces``, the package."""
    dirs: list[Path] = []
    if traces_dir:
        dirs.append(Path(traces_dir))
    shared = os.environ.get(ENV_VAR)
    if shared:
        dirs.append(Path(shared) / "traces")
    dirs.append(PACKAGE_DIR)
    return dirs


def find_file(file: str, traces_dir: str | Path | None = None) -> Path | None:
    """The first ``dir/file`` that exists in :func:`search_dirs`."""
    for d in search_dirs(traces_dir):
        if (d / file).is_file():
            return d / file
    return None


def resolve(spec: str | Path, traces_dir: str | Path | None = None) -> Path:
    """A trace argument (a path, or a name/file name from :data:`TRACES`) as an existing file.

    Raises :class:`TraceNotFound` with the places it looked and, for a trace that is not shipped,
    where to get it."""
    p = Path(spec)
    if p.is_file():
        return p
    trace = _lookup(str(spec))
    if trace is None:
        if p.name != str(spec) or p.suffix:  # looks like a path
            raise TraceNotFound(f"{spec}: no such trace file (or a name: {', '.join(TRACES)})")
        raise TraceNotFound(f"{spec!r} is neither a file nor a known trace (known: {', '.join(TRACES)})")
    found = find_file(trace.file, traces_dir)
    if found is not None:
        return found
    looked = ", ".join(str(d) for d in search_dirs(traces_dir))
    why = _WHERE_SHARED if not trace.shipped else "the package's copy is missing (broken install?)"
    raise TraceNotFound(f"trace {trace.name} ({trace.file}) not found in {looked}: {why}")


def hashes_for(trace: Path) -> Path | None:
    """The block-hash sidecar of a per-request trace file (``<stem>.hashes.gz``): beside the file, else
    the package's copy when the file is a shipped trace's (a ``--traces`` folder or ``$WARMSCALE_SHARED``
    that holds only the CSV); None when there is none. The caller checks it fits the trace."""
    name = trace.name.removesuffix(".csv") + loader.HASHES_SUFFIX
    if (trace.parent / name).is_file():
        return trace.parent / name
    if _lookup(trace.name) is not None and (PACKAGE_DIR / name).is_file():
        return PACKAGE_DIR / name
    return None


def block_hashes(trace: Path, rows: list[tuple[float, int, int]]) -> loader.BlockHashes | None:
    """The block ids of a per-request trace's ``rows`` (its sidecar, :func:`hashes_for`), checked
    against them; None when it has no sidecar."""
    side = hashes_for(trace)
    if side is None:
        return None
    hashes = loader.read_block_hashes(side)
    loader.check_block_hashes(hashes, rows, side)
    return hashes


def shipped() -> Iterable[Trace]:
    return (t for t in TRACES.values() if t.shipped)


def describe() -> str:
    """One line per known trace (for ``--help`` texts and error messages)."""
    return "; ".join(f"{t.name}{'' if t.shipped else ' (not shipped)'}" for t in TRACES.values())
