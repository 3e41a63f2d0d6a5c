"""A ServiceAccount bound to a ClusterRole of its own: what each component the test bed deploys on
its nodes gets (NVIDIA's plugin, GFD, the MIG manager, NFD's master, the node agent, the stand-in of
ACK's plugin). One builder, so each component names only its rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kubernetes_asyncio import client

from gpushare.k8s.generated import refused


def service_account_bodies(
    name: str, namespace: str, rules: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """ServiceAccount ``namespace/name``, ClusterRole ``name`` with ``rules``, and their binding."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [dict(rule) for rule in rules],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]


async def create_service_account(api: client.ApiClient, bodies: Sequence[dict[str, Any]]) -> None:
    """Create the objects of :func:`service_account_bodies`; any that exists is left as it is."""
    sa, role, binding = bodies
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    with refused(409):
        await core.create_namespaced_service_account(sa["metadata"]["namespace"], cast(Any, sa))
    with refused(409):
        await rbac.create_cluster_role(cast(Any, role))
    with refused(409):
        await rbac.create_cluster_role_binding(cast(Any, binding))
