"""Read Kubernetes objects from YAML/JSON files: multi-document streams and ``List`` kinds."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml


class ManifestError(Exception):
    """A file that cannot be read or parsed; the message names the file and the problem."""


def iter_objects(docs: Iterable[Any], source: str) -> Iterator[dict[str, Any]]:
    """Flatten documents: skip empty ones, expand ``kind: *List`` items, reject non-objects."""
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise ManifestError(f"{source}: document {index + 1} is a {type(doc).__name__}, not an object")
        kind = doc.get("kind")
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            yield from iter_objects(doc["items"], f"{source} ({kind})")
            continue
        if not isinstance(kind, str) or not kind:
            raise ManifestError(f"{source}: document {index + 1} has no 'kind'")
        yield doc


def load_text(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"{source}:{where} is not valid YAML: {problem}") from None
    return list(iter_objects(docs, source))


def load_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in ``paths`` (``-`` reads standard input), in order."""
    import sys

    out: list[dict[str, Any]] = []
    for path in paths:
        if str(path) == "-":
            out.extend(load_text(sys.stdin.read(), "<stdin>"))
            continue
        p = Path(path)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json"))
            out.extend(load_files(files))
            continue
        try:
            text = p.read_text()
        except FileNotFoundError:
            raise ManifestError(f"{p}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{p}: cannot read: {exc}") from None
        out.extend(load_text(text, str(p)))
    return out


def describe(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (or ``Kind/name``) for messages."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{ns}/{name}" if ns else f"{obj.get('kind', '?')}/{name}"
