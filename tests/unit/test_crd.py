"""The committed CRD must equal what the pydantic models generate, and be structurally sound."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpushare.api.crd import build_crd, field_paths, render_crd_yaml

CRD_FILE = Path(__file__).resolve().parents[2] / "crds" / "gpushare.io_gpusharepools.yaml"


def test_committed_crd_matches_models() -> None:
    assert CRD_FILE.read_text() == render_crd_yaml(), "crds/ drifted from the models: run `make crds`"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.items():
            out.extend(_walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(_walk(value, f"{path}[{i}]"))
    return out


def test_schema_is_structural() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        assert "title" not in node, path
        assert node.get("additionalProperties") is not False, path
        if "properties" in node:
            assert node.get("type") == "object", f"{path} has properties but no type object"
        if "anyOf" in node or "oneOf" in node:
            raise AssertionError(f"{path}: unions are not structural")


def test_crd_shape() -> None:
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["shortNames"] == ["gsp"]
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["nodeSelector"]
    # ACK's fields have no default in the CRD (the models default them), so that a pool with
    # spec.nvidia can be told to leave them out.
    assert "default" not in spec["properties"]["memoryIsolation"]
    assert "default" not in spec["properties"]["computeAllocation"]
    assert spec["properties"]["placement"]["enum"] == ["binpack", "spread"]
    assert spec["properties"]["rollout"]["properties"]["maxUnavailable"]["x-kubernetes-int-or-string"]
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert (
        "!(has(self.computeAllocation) && self.computeAllocation) || !has(self.memoryIsolation) "
        "|| self.memoryIsolation"
    ) in rules
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["conditions"]["x-kubernetes-list-type"] == "map"
    columns = [col["name"] for col in version["additionalPrinterColumns"]]
    assert columns == ["Schedule", "Backend", "Nodes", "Ready", "Status", "Age"]
    paths = [col["jsonPath"] for col in version["additionalPrinterColumns"]]
    assert len(set(paths)) == len(paths), "two columns show the same field"


def _camel_words(name: str) -> list[str]:
    """How ``kubectl describe`` labels a field: camelCase split into words (Kubernetes'
    smartLabelFor; a key with characters other than letters and '-' is printed as it is)."""
    return re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", name)


def _names(schema: dict[str, object]) -> set[str]:
    out: set[str] = set()
    props = schema.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            out.add(key)
            out |= _names(sub)
    for key in ("items", "additionalProperties"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            out |= _names(sub)
    return out


def test_field_names_render_as_words_in_kubectl_describe() -> None:
    """`gpuMemGiB` came out of describe as "Gpu Mem Gi B:": no field name may split into a lone letter."""
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in sorted(_names(schema)):
        words = _camel_words(name)
        assert "".join(words) == name, name
        assert all(len(w) > 1 for w in words), f"{name} renders as {' '.join(w.title() for w in words)!r}"


def test_mode_means_one_thing() -> None:
    """spec.admission.mode is the webhook's mode; the sharing mode in status is `schedule`."""
    paths = dict(field_paths())
    assert [p for p in paths if p.split(".")[-1] == "mode"] == ["spec.admission.mode"]
    assert "status.schedule" in paths


def test_int_or_string_fields_say_so_first() -> None:
    """kubectl explain prints any CRD int-or-string field as <Object> (its template reads only
    `type`, which an int-or-string schema has none of): the description starts with the type."""
    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    field = spec["properties"]["rollout"]["properties"]["maxUnavailable"]
    assert field["x-kubernetes-int-or-string"] is True and "type" not in field
    assert field["description"].startswith("Integer or percentage string (int-or-string")


def test_every_field_is_described() -> None:
    """`kubectl explain gsp.<path>` must say something for every field an administrator can meet."""
    paths = dict(field_paths())
    assert len(paths) > 40, sorted(paths)
    for must in (
        "spec.rollout.modeSwitch",
        "spec.nodeSelector.matchExpressions.operator",
        "status.nodeStatuses.phase",
    ):
        assert must in paths
    missing = [path for path, text in paths.items() if len(text.strip()) < 10]
    assert not missing, f"fields without a description: {missing}"


def test_descriptions_name_defaults_values_and_labels() -> None:
    paths = dict(field_paths())
    mode_switch = paths["spec.rollout.modeSwitch"]
    for word in ("Wait", "Cordon", "Evict", "Force", "ack.node.gpu.schedule", "default"):
        assert word in mode_switch, word
    assert "ack.node.gpu.placement" in paths["spec.placement"]
    assert "cgpu.disable.isolation" in paths["spec.memoryIsolation"]
    assert "core_mem" in paths["spec.computeAllocation"]
    assert "300" in paths["spec.devicePlugin.readyTimeoutSeconds"]
