"""The plugin-restart step of one node (policy.restart.restart_step), as a table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import DevicePlugin
from gpushare.policy import RestartRecord
from gpushare.policy import conditions as reasons
from gpushare.policy.restart import PLUGIN_RECREATE_GRACE, RestartStep, restart_step, watched
from gpushare.policy.views import PluginPod, PodView, plugin_pod

SINCE = datetime(2026, 11, 29, 12, 0, 1, tzinfo=UTC)
PENDING = RestartRecord("h", "2026-11-29T12:00:01Z", "Pending", "gpu")
FAILED = RestartRecord("h", "2026-11-29T12:00:01Z", "Failed", "gpu", "timed out")
DP = DevicePlugin.model_validate({"readyTimeoutSeconds": 120})


def pod(uid: str, created: datetime | None, *, ready: bool = True, deleting: bool = False) -> PluginPod:
    return PluginPod("n0", "kube-system", f"dp-{uid}", uid, created, ready, deleting)


OLD = pod("old", SINCE - timedelta(hours=1))
NEW_READY = pod("new", SINCE + timedelta(seconds=5))
NEW_STARTING = pod("new", SINCE + timedelta(seconds=5), ready=False)
LATER = SINCE + timedelta(seconds=10)


@pytest.mark.parametrize(
    ("record", "pods", "now", "kw", "expected"),
    [
        pytest.param(
            PENDING, [OLD, NEW_READY], LATER, {},
            RestartStep("Done", "Restarted", metric="ready", forget=("old", "new")),
            id="a-fresh-ready-pod-finishes-it",
        ),
        pytest.param(
            FAILED, [NEW_READY], LATER, {},
            RestartStep("Done", "Restarted", forget=("new",)),
            id="a-failed-one-becomes-done-without-counting-again",
        ),
        pytest.param(FAILED, [OLD], LATER, {}, RestartStep(), id="failed-stays-without-deleting"),
        pytest.param(
            PENDING, [OLD], SINCE - timedelta(milliseconds=300), {}, RestartStep(), id="nothing-before-since"
        ),
        pytest.param(PENDING, [OLD], LATER, {}, RestartStep(delete=(OLD,)), id="old-pods-are-deleted"),
        pytest.param(
            PENDING, [OLD], LATER, {"deleted_uids": {"old"}}, RestartStep(), id="never-deleted-twice"
        ),
        pytest.param(
            PENDING, [pod("old", SINCE - timedelta(hours=1), deleting=True)], LATER, {}, RestartStep(),
            id="a-terminating-pod-is-left-alone",
        ),
        pytest.param(PENDING, [NEW_STARTING], LATER, {}, RestartStep(), id="waits-for-the-new-pod"),
        pytest.param(
            PENDING, [], LATER, {"took_over_at": SINCE - timedelta(minutes=1)},
            RestartStep("Done", reasons.NODE_NO_PLUGIN_POD, metric="no_plugin"),
            id="no-plugin-pod-is-done-at-once-for-the-replica-that-owed-it",
        ),
        pytest.param(
            PENDING, [], LATER, {"deleted_since": PENDING.since}, RestartStep(),
            id="no-pod-after-our-own-delete-waits-for-the-daemonset",
        ),
        pytest.param(
            PENDING, [], LATER, {"took_over_at": LATER - timedelta(seconds=1)}, RestartStep(),
            id="taking-over-waits-a-grace-for-a-pod-the-predecessor-deleted",
        ),
        pytest.param(
            PENDING, [], LATER + PLUGIN_RECREATE_GRACE, {"took_over_at": LATER},
            RestartStep("Done", reasons.NODE_NO_PLUGIN_POD, metric="no_plugin"),
            id="after-the-grace-no-pod-is-no-plugin",
        ),
        pytest.param(
            PENDING, [OLD], SINCE + timedelta(seconds=121), {},
            RestartStep(
                "Failed",
                "no Ready device plugin pod (kube-system, "
                f"{DP.pod_selector.to_query()}) on n0 120s after the labels changed",
                delete=(OLD,),
                metric="timeout",
            ),
            id="times-out-still-deleting-what-is-old",
        ),
    ],
)  # fmt: skip
def test_restart_step(
    record: RestartRecord, pods: list[PluginPod], now: datetime, kw: dict[str, object], expected: RestartStep
) -> None:
    assert restart_step("n0", record, pods, now=now, plugin=DP, **kw) == expected  # type: ignore[arg-type]


def test_the_watched_plugin_and_its_pods() -> None:
    assert watched(DevicePlugin())
    assert not watched(DevicePlugin.model_validate({"namespace": "gpu-system"}))
    view = PodView(
        "kube-system", "dp", "u", "n0", phase="Pending", labels=dict(c.DEFAULT_PLUGIN_LABELS),
        created="2026-11-29T12:00:05Z", ready=True,
    )  # fmt: skip
    assert plugin_pod(view) == PluginPod(
        "n0", "kube-system", "dp", "u", SINCE + timedelta(seconds=4), False, False
    )
