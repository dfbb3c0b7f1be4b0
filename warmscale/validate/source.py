"""YAML files -> documents, each with a function that says where a path of it is in the file
(``file:line:column``, from PyYAML's node marks). Multi-document files; ``-`` is standard input."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from warmscale.validate.checks import Locate
from warmscale.validate.checks import Path as DocPath

SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Document:
    data: Any
    locate: Locate


class SourceError(ValueError):
    """A file that cannot be read or is not YAML; ``str()`` starts with ``file[:line:column]``."""


def files(args: list[str]) -> list[str]:
    """``-f`` arguments: files as given, directories walked for YAML files (sorted), ``-`` as is."""
    out: list[str] = []
    for a in args:
        p = Path(a)
        if a != "-" and p.is_dir():
            found = sorted(str(f) for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file())
            if not found:
                raise SourceError(f"{a}: no .yaml, .yml or .json files in this directory")
            out += found
        else:
            out.append(a)
    return out


def read(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SourceError(f"{name}: no such file") from None
    except UnicodeDecodeError as exc:
        raise SourceError(f"{name}: not a text (UTF-8) file: {exc.reason} at byte {exc.start}") from None
    except OSError as exc:
        raise SourceError(f"{name}: cannot read: {exc.strerror or exc}") from None


def _mark(name: str, node: yaml.Node) -> str:
    m = node.start_mark
    return f"{name}:{m.line + 1}:{m.column + 1}"


def _locator(name: str, root: yaml.Node) -> Locate:
    def locate(path: DocPath, at_key: bool = False) -> str:
        node, key_node = root, None
        for step in path:
            nxt = None
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(step):
                        key_node, nxt = k, v
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
                key_node, nxt = None, node.value[step]
            if nxt is None:
                break  # the path goes on where the file has nothing: point at the deepest part present
            node = nxt
        else:
            if at_key and key_node is not None:
                return _mark(name, key_node)
        return _mark(name, node)

    return locate


def documents(name: str, text: str) -> Iterator[Document]:
    """Every document of ``text``; a YAML syntax error raises :class:`SourceError` at its position."""
    loader = yaml.SafeLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            yield Document(loader.construct_document(node), _locator(name, node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        raise SourceError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise SourceError(f"{name}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()
