"""The shape of the package, checked by reading its source (issue: one model, one seam).

Each check names the files that break it, so a failure says where to look.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import aiohttp

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "gpushare"


def _modules() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(PACKAGE)): ast.parse(p.read_text(), filename=str(p))
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def _caught_names(tree: ast.Module) -> set[str]:
    """Every name in an ``except`` clause of the module (``except (A, b.C)`` gives A and C)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            for part in ast.walk(node.type):
                if isinstance(part, ast.Name):
                    out.add(part.id)
                elif isinstance(part, ast.Attribute):
                    out.add(part.attr)
    return out


def test_the_client_librarys_exception_is_caught_only_in_k8s() -> None:
    """Outside ``gpushare.k8s`` a failed request is ``ApiError`` (or its kinds ``Conflict`` and
    ``ApiUnavailable``), never kubernetes_asyncio's ``ApiException``. The development harness
    (``devcluster/``, not in the wheel) drives the cluster through the generated client, as the
    tests do, and is exempt."""
    offenders = sorted(
        name
        for name, tree in _modules().items()
        if not name.startswith(("k8s/", "devcluster/")) and "ApiException" in _caught_names(tree)
    )
    assert offenders == []
    imports = sorted(
        name
        for name, tree in _modules().items()
        if not name.startswith(("k8s/", "devcluster/"))
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kubernetes_asyncio")
    )
    assert imports == []


def _private_names_of(package_dir: Path) -> set[str]:
    """The private attribute names a library's source defines on its objects (``self._x``)."""
    found: set[str] = set()
    for path in package_dir.rglob("*.py"):
        found.update(re.findall(r"self\.(_[a-z]\w*)", path.read_text(errors="replace")))
    return found


def test_no_private_aiohttp_attribute_is_read() -> None:
    """The webhook's server and the client layer use aiohttp's public API only: no module that
    imports aiohttp reads or writes an attribute private to aiohttp, on an aiohttp object
    (``session._read_bufsize``) or on ``self`` in a subclass of an aiohttp class (``self._loop``,
    ``self._kwargs`` of its Server). A private name the subclass sets itself is its own."""
    aiohttp_private = _private_names_of(Path(aiohttp.__file__).parent)
    offenders: list[str] = []
    for name, tree in _modules().items():
        if not any(
            (
                isinstance(n, ast.Import | ast.ImportFrom)
                and any(a.name.startswith("aiohttp") for a in n.names)
            )
            or (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("aiohttp"))
            for n in ast.walk(tree)
        ):
            continue
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            if not any(
                "aiohttp" in ast.unparse(b) or ast.unparse(b) in ("RequestHandler", "BaseRequest")
                for b in cls.bases
            ):
                continue
            own = {
                n.attr for n in ast.walk(cls) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
            } | {n.name for n in ast.walk(cls) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            offenders += [
                f"{name}: {cls.name} self.{n.attr}"
                for n in ast.walk(cls)
                if isinstance(n, ast.Attribute)
                and ast.unparse(n.value) == "self"
                and n.attr in aiohttp_private
                and n.attr not in own
            ]
        offenders += [
            f"{name}: {ast.unparse(n)}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute)
            and n.attr.startswith("_")
            and not n.attr.startswith("__")
            and ast.unparse(n.value) not in ("self", "cls")
            and n.attr in aiohttp_private
        ]
    assert offenders == []
