"""The operator's Kubernetes side effects: node patches, plugin pods, evictions, events, status.

Every request goes through ``retry.call`` (backoff on 5xx/429/connection errors; ``call_or_absent``
where 404 means gone) and every write is counted in
``gpushare_api_writes_total``. Nothing here decides anything: the plans come from
``gpushare.policy``.

RBAC: nodes get/list/watch/patch; pods list/watch (cluster-wide) and delete (only in the
device-plugin namespaces, one Role each); pods/eviction create; events create; gpusharepools
get/list/watch/patch and gpusharepools/status patch (docs/security.md).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare.k8s.retry import call, call_if_present, call_or_absent
from gpushare.policy import PodView
from gpushare.policy.views import PluginPod

MERGE_PATCH = "application/merge-patch+json"
#: The generated stubs do not list ``_content_type``; the client accepts it.
_MERGE: dict[str, Any] = {"_content_type": MERGE_PATCH}
FIELD_MANAGER = "gpushare-operator"


class PluginNamespaceNotAllowed(ApiException):
    """A device-plugin namespace the operator was not given (``--plugin-namespaces``).

    A 403 known before any request: the reconciler reports it like one (the node's restart is
    Failed with this message in the pool's status) instead of the apiserver's bare Forbidden.
    """

    def __init__(self, namespace: str, allowed: frozenset[str]) -> None:
        super().__init__(status=403, reason="Forbidden")
        self.namespace = namespace
        self.message = plugin_namespace_problem(namespace, allowed) or ""

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


async def _json(request: Awaitable[Any]) -> dict[str, Any]:
    """The JSON body of a raw (``_preload_content=False``) response; ApiException unless 2xx.

    The operator reads returned Nodes as dicts: no client models (parsing a Node into a ``V1Node``
    and back cost about 1 ms of CPU per write, the JSON 0.04 ms).
    """
    resp = await request
    try:
        data = await resp.read()
        if not 200 <= resp.status <= 299:
            exc = ApiException(status=resp.status, reason=resp.reason)
            exc.body = data.decode(errors="replace")
            raise exc
        out: dict[str, Any] = json.loads(data)
        return out
    finally:
        resp.release()


class Cluster:
    """API calls of the operator on one ``ApiClient``."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        events_namespace: str = "default",
        plugin_namespaces: frozenset[str] | None = None,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events_namespace = events_namespace
        #: Where device-plugin pods may be deleted; None = anywhere RBAC allows.
        self.plugin_namespaces = plugin_namespaces

    def _check_plugin_namespace(self, namespace: str) -> None:
        if self.plugin_namespaces is not None and namespace not in self.plugin_namespaces:
            raise PluginNamespaceNotAllowed(namespace, self.plugin_namespaces)

    async def plugin_namespaces_denied(self) -> list[str]:
        """The configured namespaces where RBAC does not let this operator delete pods."""
        authz = client.AuthorizationV1Api(self.api)
        denied = []
        for ns in sorted(self.plugin_namespaces or ()):
            review = client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=ns, verb="delete", resource="pods"
                    )
                )
            )
            result = await call(
                lambda r=review: authz.create_self_subject_access_review(r),  # type: ignore[misc]
                verb="create",
                resource="selfsubjectaccessreviews",
            )
            if not result.status.allowed:
                denied.append(ns)
        return denied

    # --- nodes ---------------------------------------------------------------------------------

    async def read_node(self, name: str) -> dict[str, Any] | None:
        """The node as the apiserver has it now; None if it is gone."""
        return await call_or_absent(
            lambda: _json(self.core.read_node(name, _preload_content=False)), verb="get", resource="nodes"
        )

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """One JSON merge patch (labels, annotations and cordon state together); None if the node is gone.

        With ``metadata.resourceVersion`` in the patch the apiserver applies it only to that version
        (409 Conflict otherwise), so a patch planned from a stale view is never applied.
        """
        return await call_or_absent(
            lambda: _json(
                self.core.patch_node(
                    name, dict(patch), field_manager=FIELD_MANAGER, _preload_content=False, **_MERGE
                )
            ),
            verb="patch",
            resource="nodes",
        )

    # --- pods ----------------------------------------------------------------------------------

    async def pods_on_node(self, node: str) -> list[PodView]:
        """Pods bound to ``node`` that have not terminated (field selector, all namespaces)."""
        return await self._list_pods(f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")

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
        """Device-plugin pods on ``node`` (field selector), or on every node when ``node`` is None.

        Raises PluginNamespaceNotAllowed (a 403) for a namespace outside ``plugin_namespaces``:
        the pods there could be listed but never restarted.
        """
        self._check_plugin_namespace(namespace)
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
        self._check_plugin_namespace(namespace)
        body = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            return await call_if_present(  # False: already gone
                lambda: self.core.delete_namespaced_pod(name, namespace, body=body),
                verb="delete",
                resource="pods",
            )
        except ApiException as exc:
            if exc.status == 409:  # replaced by a same-named pod (UID mismatch)
                return False
            raise

    async def evict_pod(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API: "evicted", "gone", or "blocked" (429: a PDB forbids it now)."""
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            evicted = await call_if_present(
                lambda: self.core.create_namespaced_pod_eviction(name, namespace, body),
                verb="create",
                resource="pods/eviction",
                no_retry=frozenset({429}),
            )
        except ApiException as exc:
            if exc.status == 429:
                return "blocked"
            raise
        return "evicted" if evicted else "gone"

    # --- pools ---------------------------------------------------------------------------------

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the pool's status subresource; False if the pool is gone."""
        return await call_if_present(
            lambda: self.custom.patch_cluster_custom_object_status(
                c.GROUP, c.VERSION, c.PLURAL, name, {"status": dict(status)}, **_MERGE
            ),
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
