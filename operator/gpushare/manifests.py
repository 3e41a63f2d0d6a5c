"""Read Kubernetes objects from YAML/JSON files: multi-document streams and ``List`` kinds.

Input is bounded like the apiserver bounds requests, so a hostile or broken file fails fast with
one line instead of a traceback: nesting depth (:data:`MAX_DEPTH`), document and file size
(:data:`MAX_DOCUMENT_BYTES`, :data:`MAX_FILE_BYTES`), and alias expansion (:data:`MAX_ALIASES`,
:data:`MAX_EXPANDED_NODES`: a "billion laughs" alias bomb). Duplicate mapping keys are an error,
as in kubectl. A file that fails to parse and contains ``{{ ... }}`` is named a Helm template.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: Deepest nesting of mappings/lists accepted (Kubernetes objects stay far below it).
MAX_DEPTH = 100
#: Largest document (the apiserver's request limit is 3 MiB) and file.
MAX_DOCUMENT_BYTES = 3 * 1024 * 1024
MAX_FILE_BYTES = 32 * 1024 * 1024
#: Aliases per document, and nodes once every alias is expanded.
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 1_000_000
_HELM_RE = re.compile(r"\{\{-?\s*(?:[.$\"(/]|[a-z]+\b)")


class ManifestError(Exception):
    """A file that cannot be read or parsed; the message names the file and the problem."""


class _Limit(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with bounded depth, aliases and document size, and no duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_document(self) -> Node | None:
        self._aliases = 0
        node: Node | None = super().compose_document()
        if node is not None:
            size = node.end_mark.index - node.start_mark.index
            if size > MAX_DOCUMENT_BYTES:
                raise _Limit(
                    f"document is {size // 1024} KiB, more than {MAX_DOCUMENT_BYTES // 1024 // 1024} MiB",
                    node.start_mark,
                )
            if self._aliases:
                _check_expansion(node)
        return node

    def _mark(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Limit(f"more than {MAX_ALIASES} aliases in one document", self._mark())
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Limit(f"nested more than {MAX_DEPTH} levels deep", self._mark())
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = key_node.value
                if key in seen:
                    raise _Limit(
                        f"duplicate key {_clip(repr(key))} (kubectl rejects duplicate keys)",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _check_expansion(root: Node) -> None:
    """Nodes of the document with every alias expanded (memoised: linear in the composed graph)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        sizes[id(node)] = total
        if total > MAX_EXPANDED_NODES:
            raise _Limit(
                f"aliases expand to more than {MAX_EXPANDED_NODES:,} values (a YAML alias bomb?)",
                node.start_mark,
            )


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


HELM_TEXT = "is a Helm template ({{ ... }} is not YAML); render it with `helm template` first"
_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth_error(text: str) -> str | None:
    """PyYAML's scanner is quadratic in flow nesting (``[[[[...``), so it is bounded before parsing.
    Brackets inside quoted strings are counted too; only 100 unclosed ones in a row could matter."""
    depth = 0
    for m in _BRACKETS.finditer(text):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                return f"line {line}: nested more than {MAX_DEPTH} levels deep"
        elif depth:
            depth -= 1
    return None


def looks_like_helm(text: str) -> bool:
    return bool(_HELM_RE.search(text))


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
    if len(text) > MAX_FILE_BYTES:
        raise ManifestError(f"{source}: larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
    deep = _flow_depth_error(text)
    if deep is not None:
        raise ManifestError(f"{source}: {deep} is not accepted")
    try:
        loader = _BoundedLoader(text)
        try:
            docs = []
            while loader.check_data():  # type: ignore[no-untyped-call]
                docs.append(loader.get_data())
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = _clip(str(getattr(exc, "problem", None) or exc), 200)
        if not isinstance(exc, _Limit) and looks_like_helm(text):
            raise ManifestError(f"{source}: {HELM_TEXT}") from None
        what = "is not accepted" if isinstance(exc, _Limit) else "is not valid YAML"
        raise ManifestError(f"{source}:{where} {what}: {problem}") from None
    except (RecursionError, MemoryError) as exc:  # defence in depth: the limits above come first
        raise ManifestError(f"{source}: too complex to read ({type(exc).__name__})") from None
    try:
        return list(iter_objects(docs, source))
    except ManifestError:
        if looks_like_helm(text):
            raise ManifestError(f"{source}: {HELM_TEXT}") from None
        raise


def load_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every object in ``paths`` (``-`` reads standard input), in order; the first bad file raises."""
    objects, errors = collect_files(paths, keep_going=False)
    if errors:
        raise ManifestError(errors[0])
    return objects


def collect_files(
    paths: Iterable[str | Path], keep_going: bool = True
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object in ``paths`` and one message per file that could not be read; with
    ``keep_going`` the other files (e.g. the rest of a directory) are still read."""
    import sys

    out: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in paths:
        try:
            if str(path) == "-":
                out.extend(load_text(sys.stdin.read(), "<stdin>"))
                continue
            p = Path(path)
            if p.is_dir():
                files = sorted(
                    f for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json") and f.is_file()
                )
                more, errs = collect_files(files, keep_going)
                out.extend(more)
                errors.extend(errs)
                if errs and not keep_going:
                    return out, errors
                continue
            try:
                if p.stat().st_size > MAX_FILE_BYTES:
                    raise ManifestError(f"{p}: larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
                text = p.read_text()
            except FileNotFoundError:
                raise ManifestError(f"{p}: no such file") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise ManifestError(f"{p}: cannot read: {_clip(str(exc), 200)}") from None
            out.extend(load_text(text, str(p)))
        except ManifestError as exc:
            errors.append(str(exc))
            if not keep_going:
                return out, errors
    return out, errors


def describe(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (or ``Kind/name``) for messages."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{ns}/{name}" if ns else f"{obj.get('kind', '?')}/{name}"
