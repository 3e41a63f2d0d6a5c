"""Generate the GPUSharePool CustomResourceDefinition from the pydantic models.

pydantic's JSON schema is turned into a Kubernetes structural schema: ``$ref`` inlined, titles and
``additionalProperties: false`` dropped, the int-or-string union rewritten, ``default`` kept.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from gpushare import constants as c
from gpushare.api.v1alpha1 import GPUSharePoolSpec, GPUSharePoolStatus

_DROP = {"title", "discriminator"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _structural(target, defs)
    out: dict[str, Any] = {}
    if node.get("x-kubernetes-int-or-string"):
        out["x-kubernetes-int-or-string"] = True
        for key in ("default", "description", "x-kubernetes-validations"):
            if key in node:
                out[key] = node[key]
        return out
    if "anyOf" in node:
        # Optional[X] comes out as anyOf [X, null]: keep X (absence means None in Kubernetes).
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged.update(options[0])
            if merged.get("default", 0) is None:
                merged.pop("default")
            return _structural(merged, defs)
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _structural(value, defs)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _schema(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    result: dict[str, Any] = _structural(raw, defs)
    return result


def _printer_columns() -> list[dict[str, Any]]:
    """``kubectl get gsp``: one column per fact (NODES and READY count nodes, STATUS is the Ready
    condition's reason, as ``kubectl get nodes`` shows a word rather than True/False)."""
    return [
        {
            "name": "Schedule",
            "type": "string",
            "jsonPath": ".status.schedule",
            "description": f"The mode the pool puts on its nodes: {c.LABEL_SCHEDULE} (ACK) or the "
            f"{c.LABEL_NVIDIA_CONFIG} config name (NVIDIA)",
        },
        {
            "name": "Backend",
            "type": "string",
            "jsonPath": ".status.backend",
            "description": "The pool's GPU-sharing backend: ack or nvidia",
        },
        {
            "name": "Nodes",
            "type": "integer",
            "jsonPath": ".status.nodes.matched",
            "description": "Nodes of the pool (selected, not skipped, not in conflict)",
        },
        {
            "name": "Ready",
            "type": "integer",
            "jsonPath": ".status.nodes.ready",
            "description": "Nodes with the pool's labels that advertise its mode",
        },
        {
            "name": "Status",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
            "description": "Why the pool is Ready or not (the Ready condition's reason)",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def build_crd() -> dict[str, Any]:
    """The CRD object for GPUSharePool, as a plain dict."""
    spec_schema = _schema(GPUSharePoolSpec)
    spec_schema["description"] = (
        "Which nodes form the pool and how their GPUs are shared (ACK's memory isolation, compute "
        "allocation and placement, or NVIDIA's time-slicing or MPS), plus how changes roll out."
    )
    status_schema = _schema(GPUSharePoolStatus)
    status_schema["description"] = (
        "What the operator observed and did: schedule, conditions, node counts, GPU capacity and allocation, "
        "per-node state. Written by the operator only."
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": c.CRD_NAME},
        "spec": {
            "group": c.GROUP,
            "scope": "Cluster",
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": [c.SHORT_NAME],
                "categories": ["gpushare"],
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _printer_columns(),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "GPUSharePool declares GPU sharing for a set of nodes.",
                            "required": ["spec"],
                            "properties": {
                                # The API server documents these itself (it replaces our text for
                                # apiVersion and kind, and rejects anything but name constraints on
                                # metadata).
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


#: Top-level fields every object has; the API server publishes their documentation.
STANDARD_FIELDS = ("apiVersion", "kind", "metadata")


def field_paths(schema: dict[str, Any] | None = None, prefix: str = "") -> list[tuple[str, str]]:
    """Every field of the schema as ``(dotted path, description)``, the paths ``kubectl explain`` takes.

    Array fields are entered through their items (``nodeSelector.matchExpressions.key``); maps
    (``matchLabels``) and scalars are leaves. The default schema is the CRD's openAPIV3Schema;
    ``apiVersion``, ``kind`` and ``metadata`` (documented by the API server) are left out.
    """
    if schema is None:
        schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    out: list[tuple[str, str]] = []
    for name, sub in (schema.get("properties") or {}).items():
        if not prefix and name in STANDARD_FIELDS:
            continue
        path = f"{prefix}.{name}" if prefix else name
        out.append((path, str(sub.get("description") or "")))
        inner = sub.get("items") if sub.get("type") == "array" else sub
        if isinstance(inner, dict):
            out.extend(field_paths(inner, path))
    return out


HEADER = "# Generated by `make crds` from operator/gpushare/api/v1alpha1.py. Do not edit.\n"


def render_crd_yaml() -> str:
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


def main() -> None:
    import sys

    sys.stdout.write(render_crd_yaml())


if __name__ == "__main__":
    main()
