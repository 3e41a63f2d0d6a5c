"""The plugin-restart step of one node (pure): from its restart record and plugin pods to what to do.

A restart is owed from ``since`` (the node's ``gpushare.io/plugin-restart`` record): plugin pods
created before it are old and are deleted (once the clock has passed ``since``); a Ready pod
created after it finishes the restart. The caller does what the step says (delete the pods,
record the new state) and keeps the little the step needs to remember between passes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpushare.api.v1alpha1 import DevicePlugin
from gpushare.backends import BACKENDS
from gpushare.policy import conditions as reasons
from gpushare.policy.planner import RestartRecord, RestartState
from gpushare.policy.views import PluginPod, parse_time

#: A restart owed from before this replica started moving restarts (another replica, or this
#: operator before a restart, wrote it) may have had its plugin pod deleted just before that
#: replica stopped. With no plugin pod on the node, wait this long after taking over for the
#: DaemonSet to create the new one before recording "no device plugin pod" (it is never
#: recorded as such for a node whose pod we deleted ourselves).
PLUGIN_RECREATE_GRACE = timedelta(seconds=30)


@dataclass(frozen=True)
class RestartStep:
    """What to do for one node's owed restart now."""

    #: The state to record, or None to keep waiting.
    state: RestartState | None = None
    #: The record's ``result`` text with ``state``.
    outcome: str = ""
    #: Old plugin pods to delete (before recording ``state``).
    delete: tuple[PluginPod, ...] = ()
    #: ``gpushare_plugin_restarts_total``'s ``result`` label to count, if any.
    metric: str | None = None
    #: Pod uids the caller no longer needs to remember as deleted by it.
    forget: tuple[str, ...] = ()


def is_plugin_pod(labels: Mapping[str, str]) -> bool:
    """Whether a pod (or a selector's matchLabels) carries a backend's default device-plugin labels:
    the pods the operator's pod watch keeps besides GPU pods."""
    return any(all(labels.get(k) == v for k, v in b.default_plugin_labels.items()) for b in BACKENDS.values())


def watched(dp: DevicePlugin) -> bool:
    """Whether the pod watch sees every pod of this device plugin (it watches the backends' default
    labels in their default namespaces)."""
    return any(
        dp.namespace == b.default_plugin_namespace
        and all(dp.pod_selector.match_labels.get(k) == v for k, v in b.default_plugin_labels.items())
        for b in BACKENDS.values()
    )


def reload_step(
    node: str,
    record: RestartRecord,
    pods: Sequence[PluginPod],
    *,
    now: datetime,
    plugin: DevicePlugin,
    advertised: bool,
    stale: str,
) -> RestartStep:
    """The step of a plugin that reloads itself when the node's labels change (NVIDIA's
    config-manager): nothing to delete. Done once the node advertises the mode of its labels
    (``advertised``) with a Ready plugin pod; Failed past ``readyTimeoutSeconds``, saying why
    (``stale``: what the node advertises instead; the plugin pods' state)."""
    ready = [p for p in pods if p.ready and not p.deleting]
    if advertised and ready:
        metric = "ready" if record.state == "Pending" else None
        return RestartStep("Done", "Reloaded", metric=metric)
    if record.state == "Failed":
        return RestartStep()
    since = parse_time(record.since) or now
    if now - since <= timedelta(seconds=plugin.ready_timeout_seconds):
        return RestartStep()
    where = f"({plugin.namespace}, {plugin.pod_selector.to_query()})"
    if not pods:
        why = f"no device plugin pod {where} on {node}"
    elif not ready:
        why = f"device plugin pod {pods[0].name} is not Ready{_waiting(pods[0])}"
    else:
        # Ready, yet the node advertises another mode: a container that restarts on its own (the
        # config-manager sidecar failing on the label's config, between its restarts) is why.
        restarted = next((p for p in ready if p.problem), None)
        why = f"{stale}; device plugin pod {restarted.name}: {restarted.problem}" if restarted else stale
    return RestartStep(
        "Failed", f"{why}, {plugin.ready_timeout_seconds}s after the labels changed", metric="timeout"
    )


def _waiting(pod: PluginPod) -> str:
    return f" ({pod.problem})" if pod.problem else ""


def restart_step(
    node: str,
    record: RestartRecord,
    pods: Sequence[PluginPod],
    *,
    now: datetime,
    plugin: DevicePlugin,
    deleted_uids: Collection[str] = (),
    deleted_since: str | None = None,
    took_over_at: datetime | None = None,
) -> RestartStep:
    """The step of ``node``'s owed restart ``record`` given its plugin ``pods``.

    ``deleted_uids``: plugin pods this replica already deleted (not deleted twice);
    ``deleted_since``: the ``since`` of the restart this replica deleted the node's pods for;
    ``took_over_at``: when this replica first moved restarts (a restart owed from before may have
    had its pod deleted by the replica before us: the DaemonSet gets a grace to create the new one).
    """
    since = parse_time(record.since) or now
    fresh_ready = [
        p for p in pods if (p.created is None or p.created >= since) and p.ready and not p.deleting
    ]
    if fresh_ready:
        metric = "ready" if record.state == "Pending" else None
        return RestartStep("Done", "Restarted", metric=metric, forget=tuple(p.uid for p in pods))
    if record.state == "Failed":
        return RestartStep()  # reported; becomes Done if a new plugin pod ever gets Ready
    if now < since:
        return RestartStep()  # see policy.planner.restart_since: delete only once `since` has passed
    old = tuple(
        p
        for p in pods
        if p.created is not None and p.created < since and not p.deleting and p.uid not in deleted_uids
    )
    timeout = timedelta(seconds=plugin.ready_timeout_seconds)
    if not pods and deleted_since != record.since:
        started = took_over_at or now
        if since < started and now - started < min(PLUGIN_RECREATE_GRACE, timeout):
            return RestartStep()  # owed before we took over: the replica before us may have deleted it
        # Nothing to restart (no plugin on this node): report it, do not wait for one.
        return RestartStep("Done", reasons.NODE_NO_PLUGIN_POD, metric="no_plugin")
    if now - since > timeout:
        message = (
            f"no Ready device plugin pod ({plugin.namespace}, {plugin.pod_selector.to_query()}) on {node} "
            f"{plugin.ready_timeout_seconds}s after the labels changed"
        )
        return RestartStep("Failed", message, delete=old, metric="timeout")
    return RestartStep(delete=old)
