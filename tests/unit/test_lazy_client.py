"""gpushare.lazy_client: kubernetes-asyncio's generated client packages import on first use."""

from __future__ import annotations

import importlib.abc
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from gpushare.lazy_client import _LazyLoader, reexports

PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    import gpushare  # the package alone installs nothing
    from gpushare import lazy_client
    package_only = sys.meta_path.count(lazy_client._FINDER)
    from gpushare.cli import main
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(["--version"])  # the entry point of every command installs the finder first
    import kopf  # Kopf imports kubernetes_asyncio.client when it is installed
    import gpushare.handlers, gpushare.k8s.rest  # the operator's modules and the request layer
    from kubernetes_asyncio import client
    state = lazy_client.state()

    loaded = lambda: sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models."))
    before = loaded()

    async def deserialize():
        async with client.ApiClient() as api:
            body = {"metadata": {"name": "n1", "labels": {"a": "b"}}}
            return api.deserialize(type("R", (), {"data": json.dumps(body)})(), "V1Node")

    import asyncio
    node = asyncio.run(deserialize())
    from kubernetes_asyncio.client import CoreV1Api, V1ObjectMeta
    after = loaded()
    names = {}
    exec("from kubernetes_asyncio.client.models import *", names)
    print(json.dumps({
        "package_only": package_only,
        "state": state,
        "before": before,
        "after": after,
        "node": [type(node).__name__, node.metadata.name, node.metadata.labels],
        "api": CoreV1Api.__module__,
        "meta_is_model": V1ObjectMeta is client.models.V1ObjectMeta,
        "version": client.__version__,
        "dir_has_pod": "V1Pod" in dir(client.models),
        "all": len(client.models.__all__),
        "star_has_pod": "V1Pod" in names,
        "missing": hasattr(client, "NoSuchThing"),
    }))
    """
)


def test_the_client_imports_models_only_when_used() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["package_only"] == 0
    # Kopf itself looks up two models; the eager package would have imported all ~770; gpushare's
    # own code (raw JSON through gpushare.k8s.rest) none.
    assert len(seen["before"]) < 10, seen["before"]
    assert seen["state"] == {"client_models": "lazy", "models_loaded": len(seen["before"])}
    assert seen["all"] > 700
    assert "kubernetes_asyncio.client.models.v1_node" in seen["after"]
    assert len(seen["after"]) < 30
    assert seen["node"] == ["V1Node", "n1", {"a": "b"}]
    assert seen["api"] == "kubernetes_asyncio.client.api.core_v1_api"
    assert seen["meta_is_model"] is True
    assert seen["version"]
    assert seen["dir_has_pod"] is True
    assert seen["star_has_pod"] is True
    assert seen["missing"] is False


def test_the_start_up_state_says_when_kopf_imported_the_models_first() -> None:
    """``kopf run -m gpushare.handlers``: Kopf imports the client before any gpushare entry point."""
    probe = (
        "import json, kopf, gpushare.handlers\n"
        "from gpushare import lazy_client\n"
        "print(json.dumps(lazy_client.state()))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    state = json.loads(out.stdout)
    assert state["client_models"] == "eager"
    assert state["models_loaded"] > 700


def test_only_a_pure_reexport_module_is_made_lazy() -> None:
    names, rest = reexports(
        '"""doc"""\nfrom a.b import C\nfrom a.d import E as F\n__version__ = "1"\n__all__ = ["C"]\n'
    ) or ({}, [])
    assert names == {"C": ("a.b", "C"), "F": ("a.d", "E")}
    assert len(rest) == 2
    # anything else (code, a star or relative import) keeps the package eager, as shipped
    assert reexports("from a.b import C\nprint('side effect')\n") is None
    assert reexports("from a.b import *\n") is None
    assert reexports("from .b import C\n") is None
    assert reexports("import a.b\n") is None


class _Eager(importlib.abc.Loader):
    def __init__(self) -> None:
        self.ran: list[str] = []

    def exec_module(self, module: ModuleType) -> None:
        self.ran.append(module.__name__)


def test_a_package_without_readable_source_is_imported_as_shipped(tmp_path: Path) -> None:
    eager = _Eager()
    for name, file in (("sourceless", "__init__.pyc"), ("missing", "gone/__init__.py")):
        module = ModuleType(name)
        module.__file__ = str(tmp_path / file)
        if file.endswith(".pyc"):
            (tmp_path / file).write_bytes(b"\x00\xff not text")
        _LazyLoader(eager).exec_module(module)
    pure = ModuleType("pure")
    pure.__file__ = str(tmp_path / "pure.py")
    (tmp_path / "pure.py").write_text("from json import dumps\n")
    _LazyLoader(eager).exec_module(pure)
    assert eager.ran == ["sourceless", "missing"]
    assert pure.dumps is json.dumps  # made lazy, looked up on first use
