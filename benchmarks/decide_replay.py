"""Replay the policy's recorded inputs through two versions of ``decide`` and explain every difference.

    python -m warmscale.benchmarks.decide_replay record --out R.pkl.gz -- [bench trace arguments]
    python -m warmscale.benchmarks.decide_replay compare R.pkl.gz --base REV [--json OUT]

``record`` runs ``warmscale bench trace`` in this process (warmscale only, one job) and keeps every
(observation, state, config, now) the production tracker hands to ``decide``. ``compare`` feeds each
of them to this checkout's ``decide`` and to ``decide`` as it is at git revision REV (every module of
``scaler/`` that differs loaded as it is at REV, the rest this checkout's), and counts the inputs
whose count, activity, reason or reported metric differ, by (old reason -> new reason). Both see
the same inputs, so a difference is the policy's alone, not a consequence of an earlier one.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
Decide = Callable[..., tuple[Any, Any]]


def record(out: Path, bench_args: list[str]) -> int:
    from warmscale.benchmarks import trace_replay
    from warmscale.scaler import tracker

    inputs: list[tuple[Any, Any, Any, float]] = []
    real = tracker.decide

    def keep(obs: Any, state: Any, cfg: Any, now: float) -> tuple[Any, Any]:
        inputs.append((obs, state, cfg, now))
        return real(obs, state, cfg, now)

    parser = argparse.ArgumentParser(prog="warmscale bench trace")
    trace_replay.configure(parser)
    args = parser.parse_args([*bench_args, "--policies", "warmscale", "--jobs", "1", "--quiet",
                              "--json", str(Path(tempfile.mkdtemp()) / "run.json")])
    tracker.decide = keep  # type: ignore[assignment]
    try:
        rc = trace_replay.run(args)
    finally:
        tracker.decide = real  # type: ignore[assignment]
    with gzip.open(out, "wb") as f:
        pickle.dump({"bench_args": bench_args, "inputs": inputs}, f)
    print(f"recorded {len(inputs)} decisions -> {out}", file=sys.stderr)
    return rc


def decide_at(rev: str) -> Decide:
    """``decide`` as it is at ``rev``: every module of ``scaler/`` that differs between ``rev`` and this
    checkout is loaded as it is at ``rev`` (the pipeline's steps in ``scaler/decide/`` included), the
    others are this checkout's. The old modules live only behind the returned function: ``sys.modules``
    is put back afterwards, so the rest of this process keeps this checkout's."""
    changed = subprocess.run(["git", "-C", str(REPO), "diff", "--name-only", rev, "--", "scaler/"], check=True,
                             capture_output=True, text=True).stdout.split()
    old_files = {f"warmscale.{n[:-3].replace('/', '.')}": n for n in changed if n.endswith(".py")}
    old_files.pop("warmscale.scaler.__init__", None)
    old_files["warmscale.scaler.policy"] = "scaler/policy.py"
    root = Path(tempfile.mkdtemp())
    sources: dict[str, Path] = {}
    for name, rel in old_files.items():
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{rel}"], capture_output=True, text=True)
        if shown.returncode != 0:
            continue  # new in this checkout: the old modules never import it
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(shown.stdout)
        sources[name.removesuffix(".__init__")] = path
    saved = {name: sys.modules[name] for name in list(sys.modules) if name in sources}
    for name in sources:
        sys.modules.pop(name, None)
    finder = _AtRev(sources)
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module("warmscale.scaler.policy")
    finally:
        sys.meta_path.remove(finder)
        for name in sources:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        for name, mod in saved.items():  # the import set the old module on its package: put it back
            parent, _, leaf = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], leaf, mod)
    return module.decide  # type: ignore[no-any-return]


class _AtRev(importlib.abc.MetaPathFinder):
    """Finds the modules of ``sources`` (name -> file at the base revision) there."""

    def __init__(self, sources: dict[str, Path]) -> None:
        self.sources = sources

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        file = self.sources.get(name)
        if file is None:
            return None
        return importlib.util.spec_from_file_location(name, file)


def _answer(d: Any) -> tuple[int, bool, str, float]:
    return d.desired, d.active, d.reason, round(d.metric_value, 9)


def compare(inputs: list[tuple[Any, Any, Any, float]], old: Decide, new: Decide) -> dict[str, Any]:
    diffs: Counter[str] = Counter()
    examples: dict[str, dict[str, Any]] = {}
    for obs, state, cfg, now in inputs:
        a, _ = old(obs, state, cfg, now)
        b, _ = new(obs, state, cfg, now)
        if _answer(a) != _answer(b):
            key = f"{a.reason} {a.desired} -> {b.reason} {b.desired}" if a.desired != b.desired else \
                f"{a.reason} -> {b.reason} (count {a.desired})"
            key = key if a.desired != b.desired or a.reason != b.reason else "metric value / activity"
            diffs[key] += 1
            examples.setdefault(key, {"now": now, "old": _answer(a), "new": _answer(b),
                                      "trace": [s.as_dict() for s in getattr(b, "trace", ())]})
    return {"decisions": len(inputs), "differ": sum(diffs.values()),
            "by_change": dict(diffs.most_common()), "first_example": examples}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m warmscale.benchmarks.decide_replay", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record decide's inputs from a trace replay")
    rec.add_argument("--out", type=Path, required=True, help="where to write the inputs (.pkl.gz)")
    cmp_ = sub.add_parser("compare", help="replay recorded inputs through two versions of decide")
    cmp_.add_argument("recording", type=Path, help="a file written by `record`")
    cmp_.add_argument("--base", required=True, help="git revision whose decide is the old one")
    cmp_.add_argument("--json", type=Path, default=None, help="also write the comparison here")
    bench: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench = argv[:i], argv[i + 1:]
    args = ap.parse_args(argv)
    if args.cmd == "record":
        return record(args.out, bench)
    from warmscale.scaler.policy import decide

    try:
        with gzip.open(args.recording, "rb") as f:
            doc = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        print(f"decide_replay: {args.recording}: not a recording ({exc})", file=sys.stderr)
        return 2
    result = {"bench_args": doc["bench_args"], "base": args.base, **compare(doc["inputs"], decide_at(args.base),
                                                                            decide)}
    print(f"{result['decisions']} decisions replayed ({' '.join(doc['bench_args'])}), base {args.base}: "
          f"{result['differ']} differ")
    for change, n in result["by_change"].items():
        print(f"  {n:6d}  {change}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
