"""The shape of the package, checked by reading its source (issue: one model, one seam).

Each check names the files that break it, so a failure says where to look.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import aiohttp

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "gpushare"


@functools.cache
def _modules() -> dict[str, ast.Module]:
    """Every module of the package, parsed once for all the checks (none changes a tree)."""
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


#: Harness modules that still catch the generated client's exception themselves instead of meeting
#: it through ``gpushare.k8s.generated.refused`` (this list only shrinks).
_CATCHES_NOT_YET: frozenset[str] = frozenset({"devcluster/soak.py"})


def test_the_client_librarys_exception_is_caught_only_in_k8s() -> None:
    """Outside ``gpushare.k8s`` a failed request is ``ApiError`` (or its kinds ``Conflict`` and
    ``ApiUnavailable``), never kubernetes_asyncio's ``ApiException``. The development harness
    (``devcluster/``, not in the wheel) drives the cluster through the generated client, as the
    tests do, and may import it; its errors it meets through ``gpushare.k8s.generated.refused``."""
    offenders = sorted(
        name
        for name, tree in _modules().items()
        if not name.startswith("k8s/") and "ApiException" in _caught_names(tree)
    )
    assert sorted(set(offenders) - _CATCHES_NOT_YET) == []
    assert sorted(_CATCHES_NOT_YET - set(offenders)) == [], "no longer catches it: take it off the list"
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


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source (type-only imports and
    imports inside functions too). ``from pkg import sub`` is an edge to ``pkg.sub`` when ``sub``
    is a module, as import-linter reads it."""
    names: dict[str, Path] = {}
    for p in PACKAGE.rglob("*.py"):
        parts = ("gpushare", *p.relative_to(PACKAGE).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {m: set() for m in names}
    for module, path in names.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            for target in targets:
                while target and target not in names:
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_among_the_packages_modules() -> None:
    """No two modules of gpushare import each other, directly or through others, counting imports
    made only for type checking and inside functions (the development harness too): each module
    can be read knowing only what it imports."""
    assert _cycles(_import_graph()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


#: ACK's names: the constants that hold them, and the literals.
_ACK_CONSTANTS = frozenset(
    {
        "LABEL_CGPU",
        "LABEL_DISABLE_ISOLATION",
        "LABEL_SCHEDULE",
        "LABEL_PLACEMENT",
        "SCHEDULE_DEFAULT",
        "SCHEDULE_CGPU",
        "SCHEDULE_SHARE",
        "SCHEDULE_CORE_MEM",
        "RES_GPU_MEM",
        "RES_GPU_CORE",
        "RES_GPU_COUNT",
        "GPU_RESOURCE_PREFIX",
        "KNOWN_GPU_RESOURCES",
        "MANAGED_LABELS",
        "DEFAULT_PLUGIN_NAMESPACE",
        "DEFAULT_PLUGIN_LABELS",
    }
)
_ACK_LITERAL = re.compile(r"aliyun\.com|ack\.node\.gpu|cgpu\.disable|gpushare-device-plugin")
#: Where ACK's names belong: its backend, the API (the spec and its descriptions), ACK's env
#: contract (quota.py), the constants and the development harness.
_ACK_HOME = ("backends/", "api/", "devcluster/", "quota.py", "constants.py")
#: Modules that still name ACK until the seam takes them over (this list only shrinks).
_ACK_NOT_YET: frozenset[str] = frozenset()


def _names_ack(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _ACK_CONSTANTS:
            return True
        if isinstance(node, ast.Name) and node.id in _ACK_CONSTANTS:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ACK_LITERAL.search(node.value):
            return True
    return False


def test_ack_is_named_only_behind_the_backend_seam() -> None:
    """ACK's labels and resources, literal or through constants, appear only in its backend, the
    API, quota.py, the constants and the harness, and in the modules not moved behind the seam
    yet: a module outside those that starts naming ACK fails here, and so does one of those that
    no longer does (take it off the list)."""
    naming = {
        name for name, tree in _modules().items() if not name.startswith(_ACK_HOME) and _names_ack(tree)
    }
    assert naming - _ACK_NOT_YET == set(), "name the pool's backend (gpushare.backends) instead"
    assert _ACK_NOT_YET - naming == set(), "no longer names ACK: take it off _ACK_NOT_YET"


#: MIG's names: the constants that hold them, the API's MIG models and field, and the literals.
_MIG_CONSTANTS = frozenset(
    {
        "RES_NVIDIA_MIG_PREFIX",
        "LABEL_MIG_CONFIG",
        "LABEL_MIG_CONFIG_STATE",
        "MIG_CONFIGS_NAMESPACE",
        "MIG_CONFIGS_CONFIGMAP",
    }
)
_MIG_API = frozenset({"Mig", "MigGeometry", "MigTimeSlicing", "MigConfigMap", "migconfig"})
_MIG_LITERAL = re.compile(r"nvidia\.com/mig|mig\.config|mig-parted|migStrategy")
#: Where MIG's names belong: the backends (NVIDIA's, and the kind-mismatch record ACK's catalog
#: shares with it), the API, the constants, the node agent's NVML adapter (a GPU's MIG mode), the
#: harness and the docs generator (the compatibility matrix names mig-parted's version).
_MIG_HOME = ("backends/", "api/", "gpu/", "devcluster/", "docsgen/", "constants.py")
#: Modules above the seam that name MIG (none: the admission gate reads what aims a pod at an
#: NVIDIA pool from NVIDIA's admission package; this list only shrinks).
_MIG_NOT_YET: frozenset[str] = frozenset()


def _names_mig(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        name = (
            node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        )
        if name in _MIG_CONSTANTS or name in _MIG_API or (isinstance(node, ast.Attribute) and name == "mig"):
            return True
        if isinstance(node, ast.alias) and (node.name.split(".")[-1] in _MIG_API):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _MIG_LITERAL.search(node.value):
            return True
    return False


def test_mig_is_named_only_behind_the_backend_seam() -> None:
    """MIG (its labels, resources, configs and the API's MIG block) appears only in the backends,
    the API, the constants, the agent's NVML adapter and the harness: the reconciler, the planner,
    the status and the CLIs ask the pool's backend. A module outside those that starts naming MIG
    fails here, and so does one on the list that no longer does."""
    naming = {
        name for name, tree in _modules().items() if not name.startswith(_MIG_HOME) and _names_mig(tree)
    }
    assert naming - _MIG_NOT_YET == set(), "ask the pool's backend (gpushare.backends) instead"
    assert _MIG_NOT_YET - naming == set(), "no longer names MIG: take it off _MIG_NOT_YET"


def test_a_backends_package_face_names_and_defines_nothing() -> None:
    """``backends/<name>/__init__.py`` imports its backend's object and names it; the code lives in
    the package's modules (a class or function defined in the face fails here)."""
    faces = {n: t for n, t in _modules().items() if n.startswith("backends/") and n.endswith("/__init__.py")}
    assert {"backends/ack/__init__.py", "backends/nvidia/__init__.py"} <= set(faces)
    defining = {
        name: [
            d.name for d in tree.body if isinstance(d, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        for name, tree in faces.items()
        if name != "backends/__init__.py"
    }
    assert {n: d for n, d in defining.items() if d} == {}


#: The most lines a function of the reconcile path (``reconcile/``, the effects of a pass) may have.
MAX_RECONCILE_FUNCTION_LINES = 60


def test_no_function_on_the_reconcile_path_is_over_sixty_lines() -> None:
    long = {
        f"{name}:{node.name}": node.end_lineno - node.lineno + 1
        for name, tree in _modules().items()
        if name.startswith("reconcile/")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_RECONCILE_FUNCTION_LINES
    }
    assert long == {}, "split it into named phases (see reconcile/passes.py)"
