"""Redaction of credentials in text that leaves the process (pure, no I/O).

One function, :func:`redact`, is applied at every boundary where a URL or an error message that may
carry one is shown: log records (the JSON formatter), ``/decisions``, metric labels, Kubernetes
Events and gRPC error messages. It removes

- the userinfo of any ``scheme://user:password@host`` URL (``scheme://***@host``), and
- the value of credential-like query parameters: ``token``, ``access_token``, ``api_key``,
  ``apikey``, ``key``, ``password``, ``secret``, ``sig``, ``signature`` and every ``X-Amz-*``
  (case-insensitive; ``name=***``).

>>> redact("http://admin:pw@prom:9090/api?x=1&token=abc")
'http://***@prom:9090/api?x=1&token=***'
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

# scheme://userinfo@ -- userinfo runs up to the last '@' before the authority ends ('/', '?', '#',
# whitespace or a quote), so passwords containing '@' or ':' are masked whole.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/?#\s'\"<>]*)@")
_PARAM_NAMES = r"(?:access_token|api_key|apikey|token|key|password|passwd|pwd|secret|sig|signature|x-amz-[a-z0-9\-]*)"
# name=value inside a query string or a form-encoded text: preceded by ?, & or ; (also the
# percent-encoded '&' of a nested URL), the value runs to the next separator.
_PARAM = re.compile(rf"(?P<pre>(?:[?&;]|%26|%3[Ff])(?i:{_PARAM_NAMES})(?:=|%3[Dd]))(?P<value>[^&;#\s'\"<>]*)")


def redact(text: str) -> str:
    """``text`` with URL userinfo and credential-like query parameter values masked."""
    if "@" not in text and "=" not in text and "%3" not in text.upper():
        return text
    out = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@" if m.group("user") else m.group(0), text)
    return _PARAM.sub(lambda m: f"{m.group('pre')}{MASK}" if m.group("value") else m.group(0), out)


def redact_value(value: Any) -> Any:
    """:func:`redact` applied to every string inside ``value`` (dicts, lists and tuples walked)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value
