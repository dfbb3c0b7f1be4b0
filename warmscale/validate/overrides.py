"""``KEY=VALUE`` trigger metadata given on a command line (``bench trace --warmscale-meta``, ``bench pd
--prefill-meta``), checked by the scaler's own parser like ``warmscale validate`` checks a file."""

from __future__ import annotations

from warmscale.cliargs import UsageError
from warmscale.validate.checks import metadata_problems


def metadata_overrides(flag: str, items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` trigger metadata from a repeatable flag, each key and value checked by the
    scaler's own parser (an unknown key gets a did-you-mean)."""
    out = dict(kv.split("=", 1) for kv in items)
    for key, value in out.items():
        problems, _ = metadata_problems({key: value})
        for p in problems:
            if p.key == key:  # not the "no signal source" of a lone key: the command supplies the rest
                hint = f"; did you mean {p.suggestion}?" if p.suggestion else ""
                raise UsageError(f"{flag} {key}={value}: {p.message}{hint}")
    return out
