"""The site build's own check (mkdocs.yml ``hooks:``): the pinned JavaScript the pages load from
``docs/assets/vendor/`` (Mermaid, iframe-worker's shim) must be there, or the built site would
show diagrams as text and search would not start, with no error from ``mkdocs build``.
``make docs-assets`` (hack/docs-assets.sh) fetches them; ``make docs`` and ``make lint`` run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

VENDOR = "assets/vendor/"


def on_config(config: Any, **_: Any) -> Any:
    """Fail the build when a vendored script the pages load is missing."""
    docs = Path(config["docs_dir"])
    scripts = [str(s) for s in config["extra_javascript"]] + [str(s) for s in config["extra"]["polyfills"]]
    missing = [s for s in scripts if s.startswith(VENDOR) and not (docs / s).is_file()]
    if missing:
        raise PluginError(
            f"docs/{', docs/'.join(missing)} missing: run `make docs-assets` (hack/docs-assets.sh fetches "
            "the pinned Mermaid and iframe-worker from the npm registry)"
        )
    return config
