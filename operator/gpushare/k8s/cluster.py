"""The operator's Kubernetes side effects: node patches, plugin pods, evictions, events, status.

Every request goes through ``retry.call`` (backoff on 5xx/429/connection errors; ``call_or_absent``
where 404 means gone) and every write is counted in
``gpushare_api_writes_total``. Nothing here decides anything: the plans come from
``gpushare.policy``.

RBAC: nodes get/list/watch/patch; pods list/watch (cluster-wide) and delete (only in the
device-plugin namespaces, one Role each); configmaps get/patch (NVIDIA's named configs, in the
plugin namespaces); pods/eviction create; events create; gpusharepools
get/list/watch/patch and gpusharepools/status patch (docs/security.md).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gpushare import constants as c
from gpushare.k8s.client import ApiClient
from gpushare.k8s.rest import ApiError, Query, Rest, items, pages, path
from gpushare.k8s.retry import call, call_if_present, call_or_absent
from gpushare.policy import PodView
from gpushare.policy.views import PluginPod, plugin_pod

FIELD_MANAGER = c.OPERATOR_FIELD_MANAGER
CORE = "/api/v1"
POOLS = f"/apis/{c.GROUP}/{c.VERSION}/{c.PLURAL}"
#: Finished pods hold no GPU and wait for nothing.
UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


class PluginNamespaceNotAllowed(ApiError):
    """A device-plugin namespace the operator was not given (``--plugin-namespaces``).

    A 403 known before any request: the reconciler reports it like one (the node's restart is
    Failed with this message in the pool's status) instead of the apiserver's bare Forbidden.
    """

    def __init__(self, namespace: str, allowed: frozenset[str]) -> None:
        super().__init__(
            status=403, reason="Forbidden", message=plugin_namespace_problem(namespace, allowed) or ""
        )
        self.namespace = namespace

    def __str__(self) -> str:
        return self.message


def parse_plugin_namespaces(value: str | None) -> frozenset[str] | None:
    """``"kube-system,gpu"`` → the set; ``None``, ``""`` or ``"*"`` → None (any: RBAC alone decides)."""
    names = frozenset(x.strip() for x in (value or "").split(",") if x.strip())
    if not names or "*" in names:
        return None
    return names


def plugin_namespace_problem(namespace: str, allowed: frozenset[str] | None) -> str | None:
    """Why the operator cannot restart device-plugin pods in ``namespace``, or None if it can."""
    if allowed is None or namespace in allowed:
        return None
    return (
        f"spec.devicePlugin.namespace={namespace!r} is not one of the operator's device-plugin "
        f"namespaces ({', '.join(sorted(allowed))}): the operator may not delete (restart) "
        f"device-plugin pods there. Add it to the operator's --plugin-namespaces "
        f"(GPUSHARE_PLUGIN_NAMESPACES) and grant a Role for it (manifests/operator/"
        f"device-plugin-rbac.yaml), or set spec.devicePlugin.restart: Never"
    )


class Cluster:
    """API calls of the operator on one ``ApiClient``."""

    def __init__(
        self,
        api: ApiClient,
        *,
        events_namespace: str = "default",
        plugin_namespaces: frozenset[str] | None = None,
    ) -> None:
        self.api = api
        self.rest = Rest(api)
        self.events_namespace = events_namespace
        #: Where device-plugin pods may be deleted; None = anywhere RBAC allows.
        self.plugin_namespaces = plugin_namespaces

    def _check_plugin_namespace(self, namespace: str) -> None:
        if self.plugin_namespaces is not None and namespace not in self.plugin_namespaces:
            raise PluginNamespaceNotAllowed(namespace, self.plugin_namespaces)

    async def plugin_namespaces_denied(self) -> list[str]:
        """The configured namespaces where RBAC does not let this operator delete pods."""
        denied = []
        for ns in sorted(self.plugin_namespaces or ()):
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": ns, "verb": "delete", "resource": "pods"}},
            }
            result = await call(
                lambda r=review: self.rest.create(  # type: ignore[misc]
                    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", r
                ),
                verb="create",
                resource="selfsubjectaccessreviews",
            )
            if not (result.get("status") or {}).get("allowed"):
                denied.append(ns)
        return denied

    # --- nodes ---------------------------------------------------------------------------------

    async def read_node(self, name: str) -> dict[str, Any] | None:
        """The node as the apiserver has it now; None if it is gone."""
        return await call_or_absent(
            lambda: self.rest.get(path(CORE, "nodes", name)), verb="get", resource="nodes"
        )

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """One JSON merge patch (labels, annotations and cordon state together); None if the node is gone.

        With ``metadata.resourceVersion`` in the patch the apiserver applies it only to that version
        (409 Conflict otherwise), so a patch planned from a stale view is never applied.
        """
        return await call_or_absent(
            lambda: self.rest.patch(
                path(CORE, "nodes", name), dict(patch), query={"fieldManager": FIELD_MANAGER}
            ),
            verb="patch",
            resource="nodes",
        )

    # --- NVIDIA's named-config ConfigMap ----------------------------------------------------------

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await call_or_absent(
            lambda: self.rest.get(path(CORE, "namespaces", namespace, "configmaps", name)),
            verb="get",
            resource="configmaps",
        )

    async def patch_configmap(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """A JSON merge patch of gpushare's keys (with ``metadata.resourceVersion``: 409 if the
        ConfigMap changed since it was read)."""
        return await call_or_absent(
            lambda: self.rest.patch(
                path(CORE, "namespaces", namespace, "configmaps", name),
                dict(patch),
                query={"fieldManager": FIELD_MANAGER},
            ),
            verb="patch",
            resource="configmaps",
        )

    # --- pods ----------------------------------------------------------------------------------

    async def pods_on_node(self, node: str) -> list[PodView]:
        """Pods bound to ``node`` that have not terminated (field selector, all namespaces)."""
        return await self._list_pods(f"spec.nodeName={node},{UNFINISHED}")

    async def _list_pods(
        self, selector: str, namespace: str | None = None, labels: str = ""
    ) -> list[PodView]:
        """Pods matching the selectors (all namespaces unless ``namespace``), every page."""
        url = path(CORE, "namespaces", namespace, "pods") if namespace else f"{CORE}/pods"
        query = {k: v for k, v in (("fieldSelector", selector), ("labelSelector", labels)) if v}

        async def fetch(q: Query) -> dict[str, Any]:
            return await call(lambda: self.rest.get(url, query=q), verb="list", resource="pods")

        return [PodView.from_obj(pod) async for page in pages(fetch, query) for pod in items(page)]

    async def plugin_pods(
        self, namespace: str, label_selector: str, node: str | None = None
    ) -> list[PluginPod]:
        """Device-plugin pods on ``node`` (field selector), or on every node when ``node`` is None.

        Raises PluginNamespaceNotAllowed (a 403) for a namespace outside ``plugin_namespaces``:
        the pods there could be listed but never restarted.
        """
        self._check_plugin_namespace(namespace)
        selector = f"spec.nodeName={node}" if node is not None else ""
        pods = await self._list_pods(selector, namespace, label_selector)
        return [plugin_pod(pod) for pod in pods]

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete one pod if it is still the same object (UID precondition); False if already gone."""
        self._check_plugin_namespace(namespace)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            return await call_if_present(  # False: already gone
                lambda: self.rest.delete(path(CORE, "namespaces", namespace, "pods", name), body),
                verb="delete",
                resource="pods",
            )
        except ApiError as exc:
            if exc.status == 409:  # replaced by a same-named pod (UID mismatch)
                return False
            raise

    async def evict_pod(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API: "evicted", "gone", or "blocked" (429: a PDB forbids it now)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            evicted = await call_if_present(
                lambda: self.rest.create(path(CORE, "namespaces", namespace, "pods", name, "eviction"), body),
                verb="create",
                resource="pods/eviction",
                no_retry=frozenset({429}),
            )
        except ApiError as exc:
            if exc.status == 429:
                return "blocked"
            raise
        return "evicted" if evicted else "gone"

    # --- pools ---------------------------------------------------------------------------------

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the pool's status subresource; False if the pool is gone."""
        return await call_if_present(
            lambda: self.rest.patch(path(POOLS, name, "status"), {"status": dict(status)}),
            verb="patch",
            resource="gpusharepools/status",
        )

    # --- events --------------------------------------------------------------------------------

    async def event(
        self,
        obj: Mapping[str, str],
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
    ) -> None:
        """Post a core/v1 Event about ``obj`` ({apiVersion, kind, name, uid})."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": obj["name"]}
        if obj.get("uid"):
            involved["uid"] = obj["uid"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{obj['name']}.{secrets.token_hex(8)}", "namespace": self.events_namespace},
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
        }
        await call(
            lambda: self.rest.create(path(CORE, "namespaces", self.events_namespace, "events"), body),
            verb="create",
            resource="events",
            attempts=3,
        )


def pool_ref(name: str, uid: str | None) -> dict[str, str]:
    ref = {"apiVersion": c.API_VERSION, "kind": c.KIND, "name": name}
    if uid:
        ref["uid"] = uid
    return ref


def node_ref(name: str) -> dict[str, str]:
    # Nodes' events use the node name as uid, as the kubelet does; `kubectl describe node` finds them.
    return {"apiVersion": "v1", "kind": "Node", "name": name, "uid": name}
