"""Structured (JSON lines) logging for every warmscale process."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

from warmscale.signals.redact import redact, redact_value

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for k, v in vars(record).items():
            if k not in _RESERVED and not k.startswith("_"):
                out[k] = v
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        # Credentials never reach the log: URL userinfo and credential-like query parameters are masked
        # in the message and in every field (a source error quotes the URL it failed on).
        return redact(orjson.dumps(redact_value(out), default=str).decode())


class RedactingFormatter(logging.Formatter):
    """The plain-text format, with :func:`signals.redact.redact` applied to the whole line."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def setup_logging(level: str = "info", json: bool = True) -> None:
    """Configure the root logger once per process (JSON lines on stderr, or plain text)."""
    handler = logging.StreamHandler(sys.stderr)
    if json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logging.Formatter.converter = time.gmtime
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
