"""gpushare's MIG configs as entries of the MIG manager's one file, config.yaml
(gpushare.backends.nvidia.migfile), through configmap.plan_configmap's ownership rules."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.backends.nvidia import migfile
from gpushare.backends.nvidia.configmap import LayoutError, Wanted, plan_configmap, release_plan
from gpushare.devcluster import migsim

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
OURS = "gpushare-mig-0a1b2c3d"
ENTRIES = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]
WANTED = Wanted(OURS, migfile.entry_document(OURS, ENTRIES), MINUTE)


def cm(
    configs: dict[str, Any], written: dict[str, str] | None = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    body = {"version": "v1", "mig-configs": configs, **(extra or {})}
    meta: dict[str, Any] = {"name": "custom-mig-config", "namespace": "gpu-operator", "resourceVersion": "7"}
    if written is not None:
        meta["annotations"] = {c.ANNOTATION_CONFIGS: json.dumps(written)}
    return {
        "metadata": meta,
        "data": {migfile.CONFIG_KEY: yaml.safe_dump(body, sort_keys=False), "other": "x"},
    }


CHART = yaml.safe_load(migsim.CHART_DOCUMENT)["mig-configs"]


def write(
    obj: dict[str, Any], wanted: list[Wanted], in_use: frozenset[str] = frozenset(), now: datetime = T0
) -> Any:
    plan = plan_configmap(migfile.view(obj), wanted, in_use, now)
    return plan, migfile.unview(obj, plan.patch)


def file_of(patch: Any) -> dict[str, Any]:
    assert set(patch["data"]) == {migfile.CONFIG_KEY}, patch
    body: dict[str, Any] = yaml.safe_load(patch["data"][migfile.CONFIG_KEY])
    return body


def test_the_view_is_one_document_per_entry_as_migconfig_renders_it() -> None:
    obj = cm({**CHART, OURS: ENTRIES})
    view = migfile.view(obj)
    assert set(view["data"]) == {*CHART, OURS}
    assert view["data"][OURS] == WANTED.document
    assert view["metadata"]["resourceVersion"] == "7"


def test_an_entry_is_added_beside_the_others_and_the_rest_of_the_file_is_kept() -> None:
    obj = cm(dict(CHART), extra={"x-note": "kept"})
    plan, patch = write(obj, [WANTED])
    assert OURS in plan.waiting
    body = file_of(patch)
    assert body["version"] == "v1" and body["x-note"] == "kept"
    assert body["mig-configs"] == {**CHART, OURS: ENTRIES}
    assert patch["metadata"]["resourceVersion"] == "7"
    assert OURS in json.loads(patch["metadata"]["annotations"][c.ANNOTATION_CONFIGS])


def test_a_file_that_already_holds_it_gives_no_patch_and_the_entry_is_ready() -> None:
    obj = cm({**CHART, OURS: ENTRIES}, {OURS: "2025-12-31T00:00:00Z"})
    plan, patch = write(obj, [WANTED])
    assert patch is None and plan.ready == {OURS}


def test_an_entry_of_gpushare_edited_by_someone_is_put_back() -> None:
    edited = [{"devices": "all", "mig-enabled": False}]
    obj = cm({**CHART, OURS: edited}, {OURS: "2025-12-31T00:00:00Z"})
    _, patch = write(obj, [WANTED])
    assert file_of(patch)["mig-configs"] == {**CHART, OURS: ENTRIES}


def test_a_foreign_entry_of_the_same_name_is_left_as_is() -> None:
    edited = [{"devices": "all", "mig-enabled": False}]
    obj = cm({**CHART, OURS: edited})
    plan, patch = write(obj, [WANTED])
    assert plan.foreign == (OURS,) and patch is None


def test_unused_entries_of_gpushare_go_and_foreign_ones_stay() -> None:
    old = "gpushare-mig-99999999"
    obj = cm(
        {**CHART, OURS: ENTRIES, old: ENTRIES}, {OURS: "2025-12-31T00:00:00Z", old: "2025-12-31T00:00:00Z"}
    )
    plan, patch = write(obj, [WANTED])
    assert plan.removed == (old,)
    assert file_of(patch)["mig-configs"] == {**CHART, OURS: ENTRIES}
    # released (no live pool): every entry of gpushare's that no node names goes, the chart's stay
    released = release_plan(migfile.view(obj), {old}, T0)
    assert file_of(migfile.unview(obj, released.patch))["mig-configs"] == {**CHART, old: ENTRIES}


def test_an_annotation_only_change_leaves_the_file_alone() -> None:
    obj = cm(dict(CHART), {"gpushare-mig-99999999": "2025-12-31T00:00:00Z"})
    plan, patch = write(obj, [], now=T0 + HOUR)
    assert plan.removed == ("gpushare-mig-99999999",)
    assert "data" not in patch and patch["metadata"]["resourceVersion"] == "7"


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"other": "x"}, "has no key config.yaml"),
        ({migfile.CONFIG_KEY: "version: ["}, "is not YAML"),
        ({migfile.CONFIG_KEY: "just: text"}, "is not a mig-parted file"),
    ],
)
def test_a_configmap_without_a_readable_config_yaml_is_a_clear_error(data: dict[str, str], why: str) -> None:
    obj = {"metadata": {"name": "custom-mig-config", "namespace": "gpu-operator"}, "data": data}
    with pytest.raises(LayoutError) as err:
        migfile.view(obj)
    message = str(err.value)
    assert "ConfigMap gpu-operator/custom-mig-config" in message and why in message
    assert "migManager.config.name" in message and "spec.nvidia.mig.configMap" in message
