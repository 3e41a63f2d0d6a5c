"""End-to-end tests against a deployed gpushare (``make e2e-kind``: kind + manifests/).

Collected only with GPUSHARE_E2E=1 (tests/conftest.py). Every test here gets the ``e2e`` marker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)
