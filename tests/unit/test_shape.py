"""The shape of the package, checked by reading its source (issue: one model, one seam).

Each check names the files that break it, so a failure says where to look.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
