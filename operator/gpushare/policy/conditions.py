"""metav1.Condition handling with Kubernetes semantics, on plain dicts (the status JSON)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
CONFLICT = "Conflict"

# Reasons of the pool's conditions (one CamelCase word each; the Condition model checks the form).
REASON_INVALID_SPEC = "InvalidSpec"
REASON_DELETING = "Deleting"
REASON_NO_MATCHING_NODES = "NoMatchingNodes"
REASON_ALL_NODES_READY = "AllNodesReady"
REASON_NODES_NOT_READY = "NodesNotReady"
REASON_NODES_HELD = "NodesHeld"
REASON_ROLLING_OUT = "RollingOut"
REASON_ROLLOUT_STALLED = "RolloutStalled"
REASON_ROLLOUT_COMPLETE = "RolloutComplete"
REASON_NODES_FAILED = "NodesFailed"
REASON_AS_EXPECTED = "AsExpected"
REASON_NODES_IN_MULTIPLE_POOLS = "NodesInMultiplePools"
REASON_NO_CONFLICTS = "NoConflicts"

# Reasons of a node's entry in status.nodeStatuses (a Degraded or Failed node's reason can also
# become the Degraded condition's). The device plugin's mode reasons are at the end.
NODE_APPLY_FAILED = "ApplyFailed"
NODE_MULTIPLE_POOLS = "MultiplePools"
NODE_PLUGIN_RESTARTING = "DevicePluginRestarting"
NODE_PLUGIN_NOT_READY = "DevicePluginNotReady"
NODE_SKIP_LABEL = "SkipLabel"
NODE_MODE_SWITCH_BLOCKED = "ModeSwitchBlocked"
NODE_RESTORING = "Restoring"
NODE_RELEASING = "Releasing"
NODE_LABELS_CHANGED = "LabelsChanged"
#: An NVIDIA node waits for its pool's config to reach the device plugin pods before it is labelled.
NODE_CONFIG_PROPAGATING = "ConfigPropagating"
NODE_POOL_INVALID = "PoolInvalid"
NODE_NOT_READY = "NodeNotReady"
NODE_ISOLATION_UNAVAILABLE = "IsolationUnavailable"
NODE_NO_PLUGIN_POD = "NoDevicePluginPod"
NODE_LABELS_APPLIED = "LabelsApplied"

#: The order conditions are listed in; unknown types follow in their existing order.
ORDER: tuple[str, ...] = (READY, PROGRESSING, DEGRADED, CONFLICT)

Status = Literal["True", "False", "Unknown"]


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type: str,  # noqa: A002 - the metav1 field name
    status: Status,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """A new full list with ``type`` upserted (``meta.SetStatusCondition``).

    ``lastTransitionTime`` changes only when ``status`` changes; reason, message and
    observedGeneration are updated in place. The input is not modified.
    """
    out = [dict(cond) for cond in conditions]
    new: dict[str, Any] = {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": timestamp(now),
    }
    if generation is not None:
        new["observedGeneration"] = generation
    for i, cond in enumerate(out):
        if cond.get("type") == type:
            if cond.get("status") == status and cond.get("lastTransitionTime"):
                new["lastTransitionTime"] = cond["lastTransitionTime"]
            out[i] = new
            break
    else:
        out.append(new)
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(out, key=lambda cond: rank.get(str(cond.get("type")), len(ORDER)))


def get_condition(conditions: Sequence[Mapping[str, Any]], type: str) -> Mapping[str, Any] | None:  # noqa: A002
    for cond in conditions:
        if cond.get("type") == type:
            return cond
    return None


# Node reasons of the pool status from the device plugin's evidence (``SharingBackend.advertises``).
#: Labels right, plugin restarted, the node does not advertise the mode yet.
PLUGIN_MODE_PENDING: Final = "PluginModePending"
#: The plugin still advertises another mode's resources.
PLUGIN_MODE_STALE: Final = "PluginModeStale"
#: ``devicePlugin.restart: Never``: the plugin must be restarted by hand.
PLUGIN_RESTART_NEEDED: Final = "PluginRestartNeeded"
#: No device plugin registered with the kubelet.
PLUGIN_NOT_REGISTERED: Final = "PluginNotRegistered"
