"""The node agent's only Kubernetes side effects: read its Node's metadata, merge-patch it.

RBAC: ``nodes: get, patch``; the ValidatingAdmissionPolicy of manifests/agent/node-restriction.yaml
confines the patches to the agent's own node and keys. The caller (``gpushare.agent``) only
ever passes patches built by :func:`gpushare.gpu.inventory.node_metadata_patch`, which touch the
agent's own ``gpushare.io/`` keys and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from gpushare import constants as c
from gpushare.k8s.client import ApiClient
from gpushare.k8s.rest import STRATEGIC_MERGE_PATCH, ApiError, Rest, path
from gpushare.k8s.retry import call

FIELD_MANAGER = c.AGENT_FIELD_MANAGER
#: A transient failure is tried again twice within a round (the agent's loop tries the next period).
ATTEMPTS = 3
T = TypeVar("T")


class NodeAccessError(Exception):
    """The Node could not be read or patched (message names the node, the verb and the reason)."""


@dataclass(frozen=True)
class NodeMetadata:
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    resource_version: str = ""


def _message(exc: ApiError) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        return ""


def _reason(exc: ApiError) -> str:
    if exc.status == 404:
        return "not found (is --node-name / NODE_NAME the Kubernetes node name?)"
    if exc.status == 403:
        # RBAC (needs nodes get and patch) or the node-restriction policy, whose message says which
        # rule (another node, a key the agent does not own, a token without a node name).
        return f"forbidden: {_message(exc) or 'the agent ServiceAccount needs nodes get and patch'}"
    return f"HTTP {exc.status} {exc.reason}"


async def _node_call(verb: str, name: str, fn: Callable[[], Awaitable[T]]) -> T:
    """One request on the Node through the retry policy; failures as ``NodeAccessError``."""
    try:
        return await call(fn, verb=verb, resource="nodes", attempts=ATTEMPTS, give_up=False)
    except ApiError as exc:
        raise NodeAccessError(f"{verb} node {name!r}: {_reason(exc)}") from None
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise NodeAccessError(f"{verb} node {name!r}: API server unreachable: {exc!r}") from None


async def read_node_metadata(api: ApiClient, name: str) -> NodeMetadata:
    node = await _node_call("get", name, lambda: Rest(api).get(path("/api/v1", "nodes", name)))
    meta = node.get("metadata") or {}
    return NodeMetadata(
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


async def patch_node_metadata(api: ApiClient, name: str, patch: dict[str, Any]) -> str:
    """Apply one merge patch to the Node; returns the new resourceVersion."""
    # Sent as a strategic merge patch (as before); for metadata.labels/annotations (plain string
    # maps) that is exactly a JSON merge patch: keys set, null deletes.
    node = await _node_call(
        "patch",
        name,
        lambda: Rest(api).patch(
            path("/api/v1", "nodes", name),
            patch,
            content_type=STRATEGIC_MERGE_PATCH,
            query={"fieldManager": FIELD_MANAGER},
        ),
    )
    return str((node.get("metadata") or {}).get("resourceVersion") or "")
