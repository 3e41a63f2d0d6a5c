"""The operator's Kubernetes side effects: node patches, plugin pods, evictions, events, status.

Every write goes through ``retry.call`` (backoff on 5xx/429/connection errors) and is counted in
``gpushare_api_writes_total``. Nothing here decides anything: the plans come from
``gpushare.policy``.

RBAC: nodes get/list/watch/patch; pods get/list/watch/delete; pods/eviction create;
events create; gpusharepools get/list/watch/patch and gpusharepools/status patch.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.k8s.retry import call
from gpushare.policy import PodView

MERGE_PATCH = "application/merge-patch+json"
#: The generated stubs do not list ``_content_type``; the client accepts it.
_MERGE: dict[str, Any] = {"_content_type": MERGE_PATCH}
FIELD_MANAGER = "gpushare-operator"


@dataclass(frozen=True)
class PluginPod:
    node: str
    namespace: str
    name: str
    uid: str
    created: datetime | None
    ready: bool
    deleting: bool


class Cluster:
    """API calls of the operator on one ``ApiClient``."""

    def __init__(self, api: client.ApiClient, *, events_namespace: str = "default") -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events_namespace = events_namespace

    # --- nodes ---------------------------------------------------------------------------------

    async def read_node(self, name: str) -> dict[str, Any] | None:
        """The node as the apiserver has it now; None if it is gone."""
        try:
            node = await call(lambda: self.core.read_node(name), verb="get", resource="nodes")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        out: dict[str, Any] = self.api.sanitize_for_serialization(node)
        return out

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """One JSON merge patch (labels, annotations and cordon state together); None if the node is gone.

        With ``metadata.resourceVersion`` in the patch the apiserver applies it only to that version
        (409 Conflict otherwise), so a patch planned from a stale view is never applied.
        """
        try:
            result = await call(
                lambda: self.core.patch_node(name, dict(patch), field_manager=FIELD_MANAGER, **_MERGE),
                verb="patch",
                resource="nodes",
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        out: dict[str, Any] = self.api.sanitize_for_serialization(result)
        return out

    # --- pods ----------------------------------------------------------------------------------

    async def pods_on_node(self, node: str) -> list[PodView]:
        """Pods bound to ``node`` that have not terminated (field selector, all namespaces)."""
        return await self._list_pods(f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")

    async def running_pods(self) -> list[PodView]:
        """Every pod that has not terminated (one paginated list instead of one per node)."""
        return await self._list_pods("status.phase!=Succeeded,status.phase!=Failed")

    async def _list_pods(self, selector: str) -> list[PodView]:
        out: list[PodView] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"field_selector": selector, "limit": 500}
            if token:
                kwargs["_continue"] = token
            page = await call(
                lambda kw=kwargs: self.core.list_pod_for_all_namespaces(**kw),  # type: ignore[misc]
                verb="list",
                resource="pods",
            )
            out.extend(PodView.from_obj(self.api.sanitize_for_serialization(pod)) for pod in page.items)
            token = page.metadata._continue
            if not token:
                return out

    async def plugin_pods(
        self, namespace: str, label_selector: str, node: str | None = None
    ) -> list[PluginPod]:
        """Device-plugin pods on ``node`` (field selector), or on every node when ``node`` is None."""
        kwargs: dict[str, Any] = {"label_selector": label_selector}
        if node is not None:
            kwargs["field_selector"] = f"spec.nodeName={node}"
        page = await call(
            lambda: self.core.list_namespaced_pod(namespace, **kwargs),
            verb="list",
            resource="pods",
        )
        out = []
        for pod in page.items:
            conditions = pod.status.conditions if pod.status else None
            out.append(
                PluginPod(
                    node=pod.spec.node_name or "",
                    namespace=pod.metadata.namespace,
                    name=pod.metadata.name,
                    uid=pod.metadata.uid,
                    created=pod.metadata.creation_timestamp,
                    ready=bool(pod.status and pod.status.phase == "Running")
                    and any(x.type == "Ready" and x.status == "True" for x in conditions or []),
                    deleting=pod.metadata.deletion_timestamp is not None,
                )
            )
        return out

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete one pod if it is still the same object (UID precondition); False if already gone."""
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            await call(
                lambda: self.core.delete_namespaced_pod(name, namespace, body=body),
                verb="delete",
                resource="pods",
            )
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or replaced by a same-named pod (UID mismatch)
                return False
            raise
        return True

    async def evict_pod(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API: "evicted", "gone", or "blocked" (429: a PDB forbids it now)."""
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            await call(
                lambda: self.core.create_namespaced_pod_eviction(name, namespace, body),
                verb="create",
                resource="pods/eviction",
                no_retry=frozenset({429}),
            )
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            if exc.status == 429:
                return "blocked"
            raise
        return "evicted"

    # --- pools ---------------------------------------------------------------------------------

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the pool's status subresource; False if the pool is gone."""
        try:
            await call(
                lambda: self.custom.patch_cluster_custom_object_status(
                    c.GROUP, c.VERSION, c.PLURAL, name, {"status": dict(status)}, **_MERGE
                ),
                verb="patch",
                resource="gpusharepools/status",
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

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
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                name=f"{obj['name']}.{secrets.token_hex(8)}", namespace=self.events_namespace
            ),
            involved_object=client.V1ObjectReference(
                api_version=obj.get("apiVersion"), kind=obj.get("kind"), name=obj["name"], uid=obj.get("uid")
            ),
            reason=reason,
            message=message[:1024],
            type=type_,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER,
            reporting_instance=FIELD_MANAGER,
        )
        await call(
            lambda: self.core.create_namespaced_event(self.events_namespace, body),
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
