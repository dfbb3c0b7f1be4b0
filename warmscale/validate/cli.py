"""``warmscale validate -f FILE``: ScaledObjects and annotated workloads checked offline.

Prints one line per finding (``file:line:column: error|warning: object: key = value: why``) and a
summary. Exit status: 0 when there is no error (warnings allowed, unless --strict), 1 when there is
one, 2 when a file cannot be read or is not YAML.
"""

from __future__ import annotations

import argparse
import sys

EXIT_FINDINGS = 1
EXIT_UNREADABLE = 2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                        help="a YAML file (several documents allowed), a directory of them, or - for standard "
                             "input; repeatable")
    parser.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")
    parser.add_argument("--quiet", action="store_true", help="print findings only, no summary line")


def _position(f: object) -> tuple[int, int]:
    """A finding's (line, column), for file order within a document."""
    parts = str(getattr(f, "where", "")).rsplit(":", 2)
    try:
        return int(parts[-2]), int(parts[-1])
    except (ValueError, IndexError):
        return 0, 0


def run(args: argparse.Namespace) -> int:
    from warmscale.validate.checks import Finding, check_document
    from warmscale.validate.source import SourceError, documents, files, read

    findings: list[Finding] = []
    objects = 0
    try:
        names = files(args.filename)
        for name in names:
            for doc in documents(name, read(name)):
                found, count = check_document(doc.data, doc.locate)
                findings += sorted(found, key=_position)
                objects += count
    except SourceError as exc:
        print(f"warmscale validate: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    for f in findings:
        print(f.format())
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    if not args.quiet:
        print(f"{errors} error(s), {warnings} warning(s) in {objects} object(s) checked, {len(names)} file(s)",
              file=sys.stderr)
    return EXIT_FINDINGS if errors or (args.strict and warnings) else 0
