"""``gpushare check --offline`` says what the cluster says of ``nvidia.com/*`` quantities.

No webhook and no policy: the real kube-apiserver's own validation (pkg/apis/core/validation,
``ValidateResourceRequirements``) judges server-side dry runs of Pods and Deployments, and the
rules engine with nothing known (``check --offline``) must refuse exactly those (GS020), with
Kubernetes' words.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpushare.admission import EMPTY_CONTEXT, evaluate
from gpushare.devcluster import ClusterInfo
from support.kube import Kube

NVG = "nvidia.com/gpu"
NVS = "nvidia.com/gpu.shared"
QUANTITY = "GS020-nvidia-resource-quantity"

#: (limits, requests, words both say when refused; None: both admit)
CASES: list[tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]] = [
    ({NVS: "1.5"}, None, "must be an integer"),
    ({NVG: "500m"}, None, "must be an integer"),
    ({NVG: -1}, None, "must be greater than or equal to 0"),
    (None, {NVS: 1}, "Limit must be set for non overcommitable resources"),
    ({NVG: 2}, {NVG: 1}, f"must be equal to {NVG} limit of 2"),
    ({"nvidia.com/mig-1g.5gb": "0.5"}, None, "must be an integer"),
    ({NVG: 1}, {NVG: "1000m"}, None),
    ({NVG: 1.0}, None, None),
    ({NVS: "2"}, None, None),
]


def _spec(limits: dict[str, Any] | None, requests: dict[str, Any] | None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {
        "nodeSelector": {"gpushare.io/pool": "nowhere"},
        "containers": [{"name": "main", "image": "busybox", "resources": resources}],
    }


def _objects(limits: dict[str, Any] | None, requests: dict[str, Any] | None) -> list[dict[str, Any]]:
    spec = _spec(limits, requests)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nv-q"}, "spec": spec}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nv-q"},
        "spec": {
            "selector": {"matchLabels": {"app": "nv-q"}},
            "template": {"metadata": {"labels": {"app": "nv-q"}}, "spec": spec},
        },
    }
    return [pod, deployment]


@pytest.mark.parametrize(("limits", "requests", "words"), CASES)
def test_check_offline_refuses_what_the_apiserver_refuses(
    cluster: ClusterInfo, limits: dict[str, Any] | None, requests: dict[str, Any] | None, words: str | None
) -> None:
    kube = Kube(cluster)
    for obj in _objects(limits, requests):
        answer = kube.create(obj, namespace="default")  # a server-side dry run
        placed = {**obj, "metadata": {**obj["metadata"], "namespace": "default"}}
        ours = [f for f in evaluate(placed, EMPTY_CONTEXT) if f.rule_id == QUANTITY]
        if words is None:
            assert answer.status == 201, (obj["kind"], answer.message)
            assert ours == [], obj["kind"]
            continue
        assert answer.status == 422, (obj["kind"], answer.status, answer.message)
        assert words in answer.message, (obj["kind"], answer.message)
        assert ours and all(f.verdict == "deny" for f in ours), obj["kind"]
        assert any(words in f.message for f in ours), (obj["kind"], [f.message for f in ours])
