"""The plugin-restart step of one node (policy.restart.restart_step), as a table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpushare import constants as c
from gpushare.api.v1alpha1 import DevicePlugin
from gpushare.policy import RestartRecord
from gpushare.policy import conditions as reasons
from gpushare.policy.restart import PLUGIN_RECREATE_GRACE, RestartStep, reload_step, restart_step, watched
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


# --- a plugin that reloads itself (NVIDIA's config-manager): policy.restart.reload_step -------

STALE = "labelled nvidia.com/device-plugin.config=x, but the node advertises nvidia.com/gpu: 2"
SIDECAR_DOWN = "container nvidia-device-plugin-sidecar: CrashLoopBackOff, 2 restarts, last exit 1"
SIDECAR_RESTARTED = "container nvidia-device-plugin-sidecar: restarted, 2 restarts, last exit 1"
TIMED_OUT = SINCE + timedelta(seconds=121)


def _with_problem(p: PluginPod, problem: str) -> PluginPod:
    return PluginPod(p.node, p.namespace, p.name, p.uid, p.created, p.ready, p.deleting, problem)


@pytest.mark.parametrize(
    ("pods", "now", "advertised", "expected"),
    [
        pytest.param(
            [OLD], LATER, True, RestartStep("Done", "Reloaded", metric="ready"),
            id="advertised-with-a-ready-pod",
        ),
        pytest.param([NEW_STARTING], LATER, True, RestartStep(), id="advertised-but-no-ready-pod-yet"),
        pytest.param([OLD], LATER, False, RestartStep(), id="within-the-timeout"),
        pytest.param(
            [_with_problem(NEW_STARTING, SIDECAR_DOWN)], TIMED_OUT, False,
            RestartStep(
                "Failed",
                f"device plugin pod dp-new is not Ready ({SIDECAR_DOWN}), 120s after the labels changed",
                metric="timeout",
            ),
            id="not-ready-names-the-container",
        ),
        pytest.param(
            [_with_problem(OLD, SIDECAR_RESTARTED)], TIMED_OUT, False,
            RestartStep(
                "Failed",
                f"{STALE}; device plugin pod dp-old: {SIDECAR_RESTARTED}, 120s after the labels changed",
                metric="timeout",
            ),
            id="ready-between-the-sidecars-restarts-still-names-it",
        ),
        pytest.param(
            [OLD], TIMED_OUT, False,
            RestartStep("Failed", f"{STALE}, 120s after the labels changed", metric="timeout"),
            id="ready-and-nothing-restarted-says-what-it-advertises",
        ),
    ],
)  # fmt: skip
def test_reload_step(pods: list[PluginPod], now: datetime, advertised: bool, expected: RestartStep) -> None:
    assert (
        reload_step("n0", PENDING, pods, now=now, plugin=DP, advertised=advertised, stale=STALE) == expected
    )


def test_a_ready_pod_with_a_restarted_container_says_so() -> None:
    """The view keeps a Ready pod's restarts: the sidecar exits and comes back while the plugin
    container runs on, and between its restarts the pod reads Ready."""
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [
            {"name": "nvidia-device-plugin-ctr", "ready": True, "restartCount": 0, "state": {"running": {}}},
            {
                "name": "nvidia-device-plugin-sidecar", "ready": True, "restartCount": 2,
                "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1}},
            },
        ],
    }  # fmt: skip
    view = PodView.from_obj({"metadata": {"name": "dp", "namespace": "kube-system"}, "status": status})
    assert view.ready and view.problem == SIDECAR_RESTARTED
