"""Where a node-local model cache may live (pure).

The cache root of a workload (``warmscale.io/cache-root``) becomes a hostPath that the stage and evict
Jobs mount read-write, so it must never name a system directory. Two checks, both on the normalised
path:

* it lies at or under one of the controller's allowed roots (``--cache-root-allow``, default
  ``/var/lib/warmscale``);
* whatever the allow-list says, it is not a system path, inside one, or a parent of one (``/``,
  ``/etc``, ``/proc``, ``/var/lib/kubelet``, ...).

A ``file://`` model source becomes a read-only hostPath in the same Jobs and in engine pods, and the
stager copies it into an entry any pod of the workload reads: so it must lie at or under one of the
controller's allowed source roots (``--file-source-allow``, default none: ``file://`` is refused), and
never be a system path (as above) nor overlap a cache root (other workloads' copies live there).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

DEFAULT_ALLOWED = ("/var/lib/warmscale",)
# file:// model sources: refused unless the controller names roots (--file-source-allow); a host path is
# readable by whoever may annotate a workload, so the default allows none.
DEFAULT_FILE_SOURCES: tuple[str, ...] = ()
# Never a cache root, nor inside one, nor above one (whatever the allow-list says).
SYSTEM_PATHS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run", "/sbin",
    "/sys", "/usr", "/var/lib/kubelet", "/var/lib/containerd", "/var/lib/docker", "/var/lib/cri-o",
    "/var/lib/etcd", "/var/lib/cni", "/var/lib/calico", "/var/run", "/var/log", "/etc/kubernetes", "/opt/cni",
    "/home", "/snap",
)


def normalise(path: str) -> str:
    p = posixpath.normpath(path.strip())
    return "/" if p in ("/", "//") else p


def _within(path: str, base: str) -> bool:
    return base == "/" or path == base or path.startswith(base.rstrip("/") + "/")


def system_path_conflict(path: str) -> str | None:
    """The system path ``path`` is, lies in, or contains; None if it touches none."""
    p = normalise(path)
    if p == "/":
        return "/"
    for s in SYSTEM_PATHS:
        if _within(p, s) or _within(s, p):
            return s
    return None


def cache_root_problem(root: str, allowed: Iterable[str] = DEFAULT_ALLOWED) -> str | None:
    """Why ``root`` may not be a cache root (a sentence), or None when it may."""
    if not root.startswith("/") or "\x00" in root:
        return f"{root!r} is not an absolute path"
    p = normalise(root)
    if (s := system_path_conflict(p)) is not None:
        return f"{p} is a system path or overlaps one ({s}); refused"
    allow = [normalise(a) for a in allowed]
    if not any(_within(p, a) for a in allow):
        return f"{p} is outside the allowed cache roots ({', '.join(allow)}; controller flag --cache-root-allow)"
    return None


def file_source_problem(path: str, allowed: Iterable[str] = DEFAULT_FILE_SOURCES,
                        cache_roots: Iterable[str] = ()) -> str | None:
    """Why the host path of a ``file://`` model source is refused (a sentence), or None when it may be read."""
    if not path.startswith("/") or "\x00" in path:
        return f"file://{path} is not an absolute path"
    p = normalise(path)
    if (s := system_path_conflict(p)) is not None:
        return f"file://{p} is a system path or overlaps one ({s}); refused"
    for c in (normalise(r) for r in cache_roots):
        if _within(p, c) or _within(c, p):
            return f"file://{p} overlaps the cache root {c} (other workloads' copies live there); refused"
    allow = [normalise(a) for a in allowed]
    if not allow:
        return (f"file://{p} refused: no host path may be a model source (controller flag --file-source-allow "
                "names the roots that may)")
    if not any(_within(p, a) for a in allow):
        return f"file://{p} is outside the allowed model source roots ({', '.join(allow)}; --file-source-allow)"
    return None


def parse_file_source_allow(raw: str) -> tuple[str, ...]:
    """``--file-source-allow`` -> normalised tuple ("" -> none); a system path (or a parent of one) is refused."""
    if not raw.strip():
        return ()
    out = parse_allow_list(raw, "--file-source-allow")
    for a in out:
        if (s := system_path_conflict(a)) is not None:
            raise ValueError(f"--file-source-allow: {a} is a system path or overlaps one ({s})")
    return out


def parse_allow_list(raw: str, flag: str = "--cache-root-allow") -> tuple[str, ...]:
    """``--cache-root-allow`` (comma-separated absolute paths) -> normalised tuple; ValueError if bad."""
    out = []
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.startswith("/") or "\x00" in part or ".." in part.split("/"):
            raise ValueError(f"{flag}: {part!r} is not an absolute path without '..'")
        out.append(normalise(part))
    if not out:
        raise ValueError(f"{flag}: empty")
    return tuple(out)
