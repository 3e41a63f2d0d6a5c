"""Import kubernetes-asyncio's generated client lazily, one model or API class when first used.

``kubernetes_asyncio.client``, ``.client.api`` and ``.client.models`` are generated packages whose
``__init__`` imports every API group and all ~770 model classes: 63 MiB of resident memory in every
gpushare process (operator, webhook, node agent; measured with ``ru_maxrss`` around the import),
although gpushare uses a dozen of them. Kopf imports the package too, whenever it is installed.

``install()`` (called by the entry point of every gpushare command, ``gpushare.cli.main``, before
anything imports the client; importing ``gpushare`` alone changes nothing) adds an import finder
for just those three packages. The package module it makes holds what the real
``__init__`` assigns (``__version__``, ``__all__``) and, for every ``from X import Y`` of that
``__init__``, imports ``X`` when ``Y`` is first looked up (PEP 562 ``__getattr__``). Submodules
import as before (the package keeps its ``__path__``), ``dir()`` and ``__all__`` list every name,
and ``from kubernetes_asyncio.client import *`` imports them all, as the eager package does. If a
future ``__init__`` holds anything else, or its source cannot be read (a sourceless install), that
package is imported eagerly, exactly as shipped.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: The generated packages whose ``__init__`` only re-exports (checked when each is imported).
LAZY_PACKAGES = frozenset(
    {"kubernetes_asyncio.client", "kubernetes_asyncio.client.api", "kubernetes_asyncio.client.models"}
)


def reexports(source: str) -> tuple[dict[str, tuple[str, str]], list[ast.stmt]] | None:
    """(name → (module, attribute) for each absolute ``from X import Y``, the other statements)
    when the module holds only those, a docstring and plain assignments; else None."""
    names: dict[str, tuple[str, str]] = {}
    rest: list[ast.stmt] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    return None
                names[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            rest.append(node)
        else:
            return None
    return names, rest


class _LazyLoader(importlib.abc.Loader):
    def __init__(self, eager: importlib.abc.Loader) -> None:
        self.eager = eager

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        path = Path(str(module.__file__))
        try:  # only a readable source file (not a sourceless .pyc install) can be made lazy
            parsed = reexports(path.read_text(encoding="utf-8")) if path.suffix == ".py" else None
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            parsed = None
        if parsed is None:
            self.eager.exec_module(module)
            return
        names, rest = parsed
        body = ast.Module(body=rest, type_ignores=[])
        exec(compile(body, str(path), "exec"), module.__dict__)
        if "__all__" not in module.__dict__:
            module.__dict__["__all__"] = sorted(names)  # the star-import an eager package gives
        mod_name = module.__name__

        def __getattr__(name: str) -> Any:
            try:
                source, attr = names[name]
            except KeyError:
                raise AttributeError(f"module {mod_name!r} has no attribute {name!r}") from None
            value = getattr(importlib.import_module(source), attr)
            setattr(module, name, value)  # looked up once
            return value

        def __dir__() -> list[str]:
            return sorted(set(module.__dict__) | set(names))

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        module.__dir__ = __dir__  # type: ignore[method-assign]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in LAZY_PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or spec.origin is None:
            return None
        spec.loader = _LazyLoader(spec.loader)
        return spec


_FINDER = _Finder()


def install() -> None:
    """Make the client packages lazy from now on (no effect on ones already imported)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def state() -> dict[str, object]:
    """How this process imported the generated models, for the start-up line of each long-running
    command: ``client_models`` is "lazy" (through the finder), "eager" (imported as shipped: the
    finder came too late, e.g. ``kopf run -m gpushare.handlers``, where Kopf imports the client
    first) or "absent" (not imported yet); ``models_loaded``: how many model modules are loaded."""
    package = sys.modules.get("kubernetes_asyncio.client.models")
    loaded = sum(1 for name in list(sys.modules) if name.startswith("kubernetes_asyncio.client.models."))
    if package is None:
        how = "absent"
    else:
        spec = getattr(package, "__spec__", None)
        how = "lazy" if isinstance(getattr(spec, "loader", None), _LazyLoader) else "eager"
    return {"client_models": how, "models_loaded": loaded}
