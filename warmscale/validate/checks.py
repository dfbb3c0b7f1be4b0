"""The checks of ``warmscale validate`` on one parsed YAML document (pure: the caller reads the files
and says where each path of the document sits in them).

- A ScaledObject: every warmscale trigger's metadata by the scaler's parser, every bad key reported
  (not only the first), with its value, its range and a did-you-mean for an unknown key; and a
  warning when KEDA's ``minReplicaCount``/``maxReplicaCount`` disagree with warmscale's bounds.
- A Deployment or StatefulSet with ``warmscale.io/*`` annotations: the controller's parser, the same
  way, and the scaler keys inside ``warmscale.io/trigger-metadata``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmscale.scaler.config import KEDA_KEYS, KEYS, ConfigError, ScalerConfig, deprecations, parse_metadata
from warmscale.warmpool import annotations as ann

Path = tuple[str | int, ...]
# Where a path of the document is in its file, as "file:line:column"; at_key: the key, not its value.
Locate = Callable[[Path, bool], str]

WARMSCALE_TRIGGERS = ("external", "external-push")
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
# KEDA's defaults for a ScaledObject without them (keda.sh/docs, ScaledObject spec).
KEDA_MIN_REPLICAS = 0
KEDA_MAX_REPLICAS = 100
# Enough passes to report every key of any real trigger; each pass drops the key that failed.
MAX_PASSES = 200
# How close a misspelling must be to a known key for a suggestion (difflib's ratio).
SUGGEST_CUTOFF = 0.6

_SCALER_KEYS = {k.name: k for k in KEYS}
_KNOWN_METADATA = sorted({*_SCALER_KEYS, *KEDA_KEYS})
_KNOWN_ANNOTATIONS = [ann.PREFIX + k.name for k in ann.KEYS]


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning"
    where: str  # file:line:column
    obj: str  # e.g. "ScaledObject llm/vllm-llama"
    key: str  # e.g. "spec.triggers[0].metadata.maxReplicas"
    value: str | None
    message: str
    range: str | None = None
    suggestion: str | None = None

    def format(self) -> str:
        value = "" if self.value is None else f" = {self.value!r}"
        extra = ""
        if self.range and self.range not in self.message:
            extra += f"; range {self.range}"
        if self.suggestion:
            extra += f"; did you mean {self.suggestion}?"
        return f"{self.where}: {self.severity}: {self.obj}: {self.key}{value}: {self.message}{extra}"


@dataclass(frozen=True)
class KeyProblem:
    """One bad key of a metadata or annotation map."""

    key: str
    message: str
    range: str | None
    suggestion: str | None


def suggest(name: str, known: Sequence[str]) -> str | None:
    near = difflib.get_close_matches(name, known, n=1, cutoff=SUGGEST_CUTOFF)
    if not near:  # case slips (maxreplicas) score low on the ratio
        near = [k for k in known if k.lower() == name.lower()]
    return near[0] if near else None


def _problems(data: Mapping[str, str], parse: Callable[[Mapping[str, str]], Any], known: Sequence[str],
              range_of: Callable[[str], str | None]) -> tuple[list[KeyProblem], Any]:
    """Every key ``parse`` rejects: parse, drop the key it names, parse again. Returns the problems
    and the parsed value of what is left (None when a problem names no key present, e.g. a missing
    signal source: then nothing more can be learnt by dropping)."""
    left = dict(data)
    out: list[KeyProblem] = []
    for _ in range(MAX_PASSES):
        try:
            return out, parse(left)
        except ConfigError as exc:
            unknown = exc.message.startswith("unknown")
            out.append(KeyProblem(exc.key, exc.message, range_of(exc.key),
                                  suggest(exc.key, known) if unknown else None))
            if exc.key not in left:
                return out, None
            del left[exc.key]
    return out, None


def _metadata_range(key: str) -> str | None:
    k = _SCALER_KEYS.get(key)
    return str(k.range) if k is not None and k.range is not None else None


def metadata_problems(metadata: Mapping[str, str]) -> tuple[list[KeyProblem], ScalerConfig | None]:
    """The scaler's verdict on a trigger's metadata, every bad key."""
    return _problems(metadata, parse_metadata, _KNOWN_METADATA, _metadata_range)


def annotation_problems(annotations: Mapping[str, str]) -> tuple[list[KeyProblem], ann.WarmConfig | None]:
    """The warm-pool controller's verdict on a workload's annotations, every bad key."""
    return _problems(annotations, ann.parse_annotations, _KNOWN_ANNOTATIONS, lambda _k: None)


def _strings(m: Mapping[Any, Any], path: Path, obj: str, locate: Locate, what: str) -> tuple[dict[str, str],
                                                                                              list[Finding]]:
    """The string entries of ``m``; a non-string value is an error (Kubernetes takes strings only here)."""
    good: dict[str, str] = {}
    bad: list[Finding] = []
    for k, v in m.items():
        key = str(k)
        if isinstance(v, str):
            good[key] = v
        else:
            bad.append(Finding("error", locate((*path, key), False), obj, _dotted((*path, key)),
                               None if v is None else str(v),
                               f"{what} values must be strings: quote it ({key}: \"{v}\")"))
    return good, bad


def _dotted(path: Path) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        elif "." in p or "/" in p:
            out += f"[{p}]"
        else:
            out += ("." if out else "") + p
    return out


def _map(x: Any) -> Mapping[str, Any]:
    return x if isinstance(x, Mapping) else {}


def _list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _name(doc: Mapping[str, Any]) -> str:
    meta = _map(doc.get("metadata"))
    ns = meta.get("namespace") or "default"
    return f"{doc.get('kind')} {ns}/{meta.get('name') or '(no name)'}"


def is_warmscale_trigger(trigger: Mapping[str, Any]) -> bool:
    """An external(-push) trigger whose scaler is warmscale: its address says so, or it sets one of
    warmscale's own keys."""
    if trigger.get("type") not in WARMSCALE_TRIGGERS or not isinstance(trigger.get("metadata"), Mapping):
        return False
    md = trigger["metadata"]
    return "warmscale" in str(md.get("scalerAddress", "")) or any(k in _SCALER_KEYS for k in md)


def check_document(doc: Any, locate: Locate) -> tuple[list[Finding], int]:
    """Findings of one document and how many objects were checked (a List's items each count)."""
    if not isinstance(doc, Mapping):
        return [], 0
    kind = doc.get("kind")
    if kind == "List" and isinstance(doc.get("items"), list):
        findings: list[Finding] = []
        count = 0
        for i, item in enumerate(doc["items"]):
            f, n = check_document(item, _under(locate, ("items", i)))
            findings += f
            count += n
        return findings, count
    if kind == "ScaledObject":
        return check_scaled_object(doc, locate), 1
    if kind in WORKLOAD_KINDS:
        annotations = _map(_map(doc.get("metadata")).get("annotations"))
        if any(str(k).startswith(ann.PREFIX) for k in annotations):
            return check_workload(doc, locate), 1
    return [], 0


def _under(locate: Locate, prefix: Path) -> Locate:
    return lambda path, at_key: locate((*prefix, *path), at_key)


def check_scaled_object(doc: Mapping[str, Any], locate: Locate) -> list[Finding]:
    obj = _name(doc)
    spec = _map(doc.get("spec"))
    triggers = _list(spec.get("triggers"))
    out: list[Finding] = []
    for i, trigger in enumerate(triggers):
        if not isinstance(trigger, Mapping) or not is_warmscale_trigger(trigger):
            continue
        path: Path = ("spec", "triggers", i, "metadata")
        metadata, bad = _strings(trigger["metadata"], path, obj, locate, "trigger metadata")
        out += bad
        problems, cfg = metadata_problems(metadata)
        out += _key_findings(problems, metadata, path, obj, locate)
        out += [Finding("warning", locate((*path, key), True), obj, _dotted((*path, key)), metadata[key],
                        f"removed metadata key, ignored; {replacement}")
                for key, replacement in deprecations(metadata) if key not in {p.key for p in problems}]
        if cfg is not None and not problems and not bad:  # bounds of what the scaler would really run with
            out += _bounds(spec, cfg, path, obj, locate)
    return out


def _key_findings(problems: list[KeyProblem], values: Mapping[str, str], path: Path, obj: str,
                  locate: Locate) -> list[Finding]:
    out = []
    for p in problems:
        present = p.key in values
        at = (*path, p.key) if present else path
        out.append(Finding("error", locate(at, bool(p.suggestion)), obj, _dotted((*path, p.key)),
                           values.get(p.key), p.message, p.range, p.suggestion))
    return out


def _bounds(spec: Mapping[str, Any], cfg: ScalerConfig, path: Path, obj: str, locate: Locate) -> list[Finding]:
    """KEDA's bounds clamp the HPA, warmscale's its metric: where they differ, one of them never applies."""
    def warn(key: str, value: int, message: str) -> Finding:
        shown = str(value) if key in spec else f"{value} (KEDA's default)"
        return Finding("warning", locate(("spec", key) if key in spec else ("spec",), False), obj, f"spec.{key}",
                       shown, message)

    out = []
    keda_max = spec.get("maxReplicaCount", KEDA_MAX_REPLICAS)
    keda_min = spec.get("minReplicaCount", KEDA_MIN_REPLICAS)
    if isinstance(keda_max, int) and keda_max != cfg.max_replicas:
        why = (f"KEDA caps the HPA at {keda_max}, below what warmscale may ask for" if keda_max < cfg.max_replicas
               else f"warmscale never asks for more than {cfg.max_replicas}, so KEDA's {keda_max} is never reached")
        out.append(warn("maxReplicaCount", keda_max,
                        f"differs from the trigger's maxReplicas {cfg.max_replicas}: {why}"))
    floor = 0 if cfg.scale_to_zero else cfg.min_replicas
    if isinstance(keda_min, int) and keda_min != floor:
        trigger_side = "scaleToZero true" if cfg.scale_to_zero else f"minReplicas {cfg.min_replicas}"
        why = ("KEDA keeps more replicas than warmscale's floor" if keda_min > floor
               else "below warmscale's floor: KEDA may deactivate the target where warmscale would keep replicas")
        if keda_min == 0 and not cfg.scale_to_zero:
            why = "set minReplicaCount to warmscale's floor (or scaleToZero: \"true\" in the trigger to scale to zero)"
        out.append(warn("minReplicaCount", keda_min, f"differs from the trigger's {trigger_side}: {why}"))
    return out


def check_workload(doc: Mapping[str, Any], locate: Locate) -> list[Finding]:
    obj = _name(doc)
    path: Path = ("metadata", "annotations")
    raw = doc["metadata"]["annotations"]
    annotations, out = _strings({k: v for k, v in raw.items() if str(k).startswith(ann.PREFIX)}, path, obj, locate,
                                "annotation")
    problems, _ = annotation_problems(annotations)
    out += _key_findings(problems, annotations, path, obj, locate)
    tm_key = ann.PREFIX + "trigger-metadata"
    if tm_key in annotations and not any(p.key == tm_key for p in problems):
        out += _trigger_metadata(annotations[tm_key], (*path, tm_key), obj, locate)
    return out


def _trigger_metadata(raw: str, path: Path, obj: str, locate: Locate) -> list[Finding]:
    """``warmscale.io/trigger-metadata``: the scaler keys it adds to the owned ScaledObject. Only its
    own keys are judged (the controller fills in the rest, e.g. the signal source)."""
    extra = json.loads(raw)  # the annotation parser accepted it: a JSON object of strings
    problems, _ = metadata_problems(extra)
    return [Finding("error", locate(path, False), obj, f"{_dotted(path)}.{p.key}", extra.get(p.key), p.message,
                    p.range, p.suggestion) for p in problems if p.key in extra]
