"""Read Kubernetes objects from YAML/JSON files: multi-document streams and ``List`` kinds.

Input is bounded like the apiserver bounds requests, so a hostile or broken file fails fast with
one line instead of a traceback: nesting depth (:data:`MAX_DEPTH`), document and file size
(:data:`MAX_DOCUMENT_BYTES`, :data:`MAX_FILE_BYTES`), and alias expansion (:data:`MAX_ALIASES`,
:data:`MAX_EXPANDED_NODES`: a "billion laughs" alias bomb). Duplicate mapping keys are an error,
as in kubectl. A file that fails to parse and contains ``{{ ... }}`` is named a Helm template.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import select
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from itertools import accumulate
from operator import sub
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: Deepest nesting of mappings/lists accepted (Kubernetes objects stay far below it).
MAX_DEPTH = 100
#: Largest document (the apiserver's request limit is 3 MiB) and file.
MAX_DOCUMENT_BYTES = 3 * 1024 * 1024
#: A file: about 10,000 objects, read and checked in a few seconds (docs/security.md).
MAX_FILE_BYTES = 8 * 1024 * 1024
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


class _NoDuplicateKeys(yaml.constructor.SafeConstructor):
    """Duplicate mapping keys are an error, as in kubectl (for either loader)."""

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


class _BoundedLoader(_NoDuplicateKeys, yaml.SafeLoader):
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


if hasattr(yaml, "CSafeLoader"):

    class _CFastLoader(_NoDuplicateKeys, yaml.CSafeLoader):
        """libyaml's parser with the same constructor rules (no duplicate keys)."""

    _FastLoader: type[Any] | None = _CFastLoader
else:  # a PyYAML built without libyaml: every file takes the bounded pure-Python loader
    _FastLoader = None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_bounded(text: str) -> list[Any]:
    loader = _BoundedLoader(text)
    try:
        docs = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            docs.append(loader.get_data())
        return docs
    finally:
        loader.dispose()


def _load_fast(text: str) -> list[Any]:
    """Documents through libyaml, for text :func:`_fast_path_safe` has cleared; the same limits
    on document size and alias expansion, checked on each composed document."""
    assert _FastLoader is not None
    loader = _FastLoader(text)
    aliases = "&" in text and "*" in text
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            size = node.end_mark.index - node.start_mark.index
            if size > MAX_DOCUMENT_BYTES:
                raise _Limit(
                    f"document is {size // 1024} KiB, more than {MAX_DOCUMENT_BYTES // 1024 // 1024} MiB",
                    node.start_mark,
                )
            if aliases:
                _check_expansion(node)
            docs.append(loader.construct_document(node))
        return docs
    finally:
        loader.dispose()


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
_SIGNS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
#: A line indented this far, or with this many compact ``- ``/``? `` entries, may nest deeper than
#: the C parser's fast path is allowed to see (:func:`_fast_path_safe`).
_DEEP_INDENT = re.compile(r"^ {41}", re.M)
_COMPACT_CHAIN = re.compile(r"^ *(?:[-?] +){10}", re.M)


def _flow_depth_error(text: str) -> str | None:
    """PyYAML's scanner is quadratic in flow nesting (``[[[[...``), so it is bounded before parsing.
    Brackets inside quoted strings are counted too; only 100 unclosed ones in a row could matter.
    Linear, in C-speed passes: the running depth (never below 0) is each prefix sum less the
    lowest prefix sum before it."""
    signs = memoryview(text.encode("utf-8", "surrogatepass").translate(_SIGNS, _NOT_BRACKETS)).cast("b")
    if len(signs) <= MAX_DEPTH:
        return None
    sums = list(accumulate(signs, initial=0))
    if max(map(sub, sums, accumulate(sums, min))) <= MAX_DEPTH:
        return None
    depth = 0  # rare: find the line, in Python, up to the first bracket too deep
    for m in _BRACKETS.finditer(text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        if depth > MAX_DEPTH:
            return f"line {text.count(chr(10), 0, m.start()) + 1}: nested more than {MAX_DEPTH} levels deep"
    return f"nested more than {MAX_DEPTH} levels deep"


def _fast_path_safe(text: str) -> bool:
    """Whether block nesting is surely below :data:`MAX_DEPTH`, so libyaml's parser (ten times
    faster, but recursive in C when it composes) may read ``text``: each block level needs more
    indentation, except a sequence under a key and compact entries on one line."""
    return _DEEP_INDENT.search(text) is None and _COMPACT_CHAIN.search(text) is None


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
        with _gc_paused():  # the loaders make no cyclic garbage; collecting meanwhile costs 40 %
            docs = (
                _load_fast(text) if _FastLoader is not None and _fast_path_safe(text) else _load_bounded(text)
            )
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
    """Every object in ``paths`` (``-`` reads standard input), in order. Every file is read; if any
    is bad, ManifestError names each bad one, a line each."""
    objects, errors = collect_files(paths)
    if errors:
        raise ManifestError("\n".join(errors))
    return objects


def collect_files(
    paths: Iterable[str | Path], keep_going: bool = True
) -> tuple[list[dict[str, Any]], list[str]]:
    """Every object in ``paths`` and one message per file that could not be read; with
    ``keep_going`` the other files (e.g. the rest of a directory) are still read."""
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in paths:
        try:
            if str(path) == "-":
                out.extend(load_text(read_bounded("-"), "<stdin>"))
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
            out.extend(load_text(read_bounded(p), str(p)))
        except ManifestError as exc:
            errors.append(str(exc))
            if not keep_going:
                return out, errors
    return out, errors


#: Seconds a FIFO (``mkfifo``, ``<(...)``) may take to deliver all it has, and to get a writer.
READ_TIMEOUT_S = 30.0
WRITER_TIMEOUT_S = 3.0


def read_bounded(path: str | Path, limit: int = MAX_FILE_BYTES, timeout_s: float = READ_TIMEOUT_S) -> str:
    """At most ``limit`` bytes of a file, whatever it claims to be, as UTF-8 text (ManifestError,
    one line, otherwise). ``-`` is standard input; a regular file larger than ``limit`` is refused
    before reading; a device such as ``/dev/zero`` is read up to the limit; a FIFO is read without
    blocking on a missing writer and for at most ``timeout_s`` seconds; a socket is refused."""
    name = "<stdin>" if str(path) == "-" else str(path)
    too_big = ManifestError(f"{name}: larger than {limit // 1024 // 1024} MiB")
    try:
        if str(path) == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            info = Path(path).stat()
            if stat.S_ISDIR(info.st_mode) or stat.S_ISSOCK(info.st_mode):
                raise ManifestError(f"{name}: not a file")
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise too_big
            data = (
                _read_fifo(name, limit, timeout_s) if stat.S_ISFIFO(info.st_mode) else _read_file(name, limit)
            )
    except FileNotFoundError:
        raise ManifestError(f"{name}: no such file") from None
    except OSError as exc:
        raise ManifestError(f"{name}: cannot read: {_clip(str(exc), 200)}") from None
    if len(data) > limit:
        raise too_big
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def _read_file(name: str, limit: int) -> bytes:
    with open(name, "rb") as f:
        return f.read(limit + 1)


def _read_fifo(name: str, limit: int, timeout_s: float) -> bytes:
    """A FIFO, without blocking on a writer that never comes: opened non-blocking (the reader
    holds it open, so a writer's open succeeds), read until the writer is done."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + timeout_s
        writer_deadline = time.monotonic() + WRITER_TIMEOUT_S
        while size <= limit:
            try:  # EOF: no writer (not yet, or done); EAGAIN: a writer that has sent nothing yet
                chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ManifestError(
                        f"{name}: a pipe that did not finish within {timeout_s:g} s"
                    ) from None
                select.select([fd], [], [], left)
                continue
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
            elif chunks:
                break  # the writer is done
            elif time.monotonic() > writer_deadline:
                raise ManifestError(f"{name}: a FIFO that no writer opened within {WRITER_TIMEOUT_S:g} s")
            else:
                time.sleep(0.05)  # no writer yet
        return b"".join(chunks)
    finally:
        os.close(fd)


def describe(obj: dict[str, Any]) -> str:
    """``Kind/namespace/name`` (or ``Kind/name``) for messages."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    ns = meta.get("namespace")
    return f"{obj.get('kind', '?')}/{ns}/{name}" if ns else f"{obj.get('kind', '?')}/{name}"
