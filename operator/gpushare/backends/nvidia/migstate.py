"""Where a node's MIG switch stands, from NVIDIA's MIG manager's labels and gpushare's record (pure).

The MIG manager reports on a node's ``nvidia.com/mig.config.state`` (``pending``, ``rebooting``,
``success``, ``failed``) but never says *which* config a state is about: right after gpushare
sets ``nvidia.com/mig.config`` to a new value, the node still carries the ``success`` of the
previous config until the manager starts. So gpushare records the switch on the node, in its own
annotation ``gpushare.io/mig-switch`` (:class:`MigSwitch`: the config it wrote, when, and whether
the manager has been seen working on it since), written with the label, and trusts a state only
once the manager was seen working after that write:

* ``pending`` or ``rebooting`` after the write: the manager works on the new config (the record
  says so from then on); ``success`` then, with the node advertising the geometry's resources,
  confirms the node; ``failed`` then is the new config's failure.
* Any state before the manager was seen working is the previous config's: a stale ``success``
  (or ``failed``) is never taken.
* Past ``readyTimeoutSeconds`` from the write, a node still not confirmed is named: the state
  stuck (``pending`` or a state from before the switch, the manager not picking the label up),
  and the GPU operands left ``paused-for-mig-change`` (mig-parted #485).

Observing the intermediate state is a sampling: a manager that went ``pending`` -> ``success``
between two looks at the node (the operator down for the whole of ``pending``: a SIGKILLed
leader's replacement waits behind Kopf's peering) leaves the record without it. So the apiserver's
own record of who wrote what counts too: the node's ``metadata.managedFields`` entry of a field
manager other than gpushare's that owns the state label, changed strictly after the record's
time (both to the second: the same second is not taken), is the manager's write after
gpushare's, as good as having seen it working (:func:`written_after`). That entry's time is its
last change of any field it owns, so it says when the manager last wrote, not what; and it is the
apiserver's clock against the operator's (the record's), a skew of more than a second could take a
success written just before the switch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from gpushare import constants as c

#: gpushare's record of the MIG switch it made on a node.
ANNOTATION_MIG_SWITCH = f"{c.GROUP}/mig-switch"
#: The states of ``nvidia.com/mig.config.state`` (NVIDIA's ``reconfigure-mig.sh``).
PENDING, REBOOTING, SUCCESS, FAILED = "pending", "rebooting", "success", "failed"
WORKING = (PENDING, REBOOTING)
#: What the MIG manager sets the operands' ``nvidia.com/gpu.deploy.*`` labels to while it works.
PAUSED = "paused-for-mig-change"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."

#: Condition / node-status reasons.
CONFIRMED = "MigConfigApplied"
WAITING = "MigConfigPending"
NOT_ADVERTISED = "MigResourcesNotAdvertised"
FAILED_REASON = "MigConfigFailed"
STUCK = "MigConfigStuck"
OPERANDS_PAUSED = "MigOperandsPaused"


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class MigSwitch:
    """gpushare's record of one switch: the ``nvidia.com/mig.config`` value it wrote, when, and
    whether the MIG manager has been seen working on it since."""

    config: str
    since: datetime
    seen_working: bool = False

    def dump(self) -> str:
        body = {"config": self.config, "since": _iso(self.since), "seenWorking": self.seen_working}
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    @classmethod
    def parse(cls, raw: str | None) -> MigSwitch | None:
        """None when absent or unreadable (an unreadable record trusts no state: the node waits)."""
        try:
            data = json.loads(raw or "")
            since = datetime.fromisoformat(str(data["since"]).replace("Z", "+00:00"))
            return cls(str(data["config"]), since, data.get("seenWorking") is True)
        except (ValueError, KeyError, TypeError):
            return None


def written_after(record: MigSwitch, state_written: datetime | None) -> bool:
    """Whether the state label was written after gpushare wrote ``record``: ``state_written`` is
    when a field manager other than gpushare's that owns it last wrote the node (managedFields),
    taken only in a later second than the record's (both are to the second)."""
    if state_written is None:
        return False
    return state_written.replace(microsecond=0) > record.since.replace(microsecond=0)


@dataclass(frozen=True)
class MigProgress:
    """Where a node's switch to ``config`` stands: a reason (one of this module's), words for the
    pool's status, and the record to write when it changed (None: leave it)."""

    reason: str
    message: str
    record: MigSwitch | None = None

    @property
    def confirmed(self) -> bool:
        return self.reason == CONFIRMED

    @property
    def failed(self) -> bool:
        return self.reason in (FAILED_REASON, STUCK, OPERANDS_PAUSED)


def paused_operands(labels: Mapping[str, str]) -> list[str]:
    """The operands the node's labels leave paused for a MIG change (sorted)."""
    return sorted(
        k.removeprefix(DEPLOY_PREFIX)
        for k, v in labels.items()
        if k.startswith(DEPLOY_PREFIX) and v == PAUSED
    )


def progress(
    config: str,
    labels: Mapping[str, str],
    advertised: bool,
    record: MigSwitch | None,
    now: datetime,
    timeout: timedelta,
    state_written: datetime | None = None,
) -> MigProgress:
    """Where the switch of a node with ``labels`` to MIG config ``config`` stands. ``advertised``:
    the node advertises the geometry's resources (the backend's evidence); ``record``: gpushare's
    record on the node; ``timeout``: the pool's ``readyTimeoutSeconds``; ``state_written``: when
    another field manager than gpushare's last wrote the state label (:func:`written_after`)."""
    state = labels.get(c.LABEL_MIG_CONFIG_STATE, "")
    if record is None or record.config != config:
        # Not a switch gpushare made (the node carried the config already): its state is about it.
        if state == SUCCESS and advertised:
            return MigProgress(CONFIRMED, f"{c.LABEL_MIG_CONFIG}={config} is applied")
        found = _open(
            config, state, advertised, MigSwitch(config, now, state in WORKING), now, timeout, wrote=True
        )
    elif not record.seen_working and (state in WORKING or written_after(record, state_written)):
        found = _open(config, state, advertised, replace(record, seen_working=True), now, timeout, wrote=True)
    else:
        found = _open(config, state, advertised, record, now, timeout, wrote=False)
    return _with_operands(found, labels)


def _open(
    config: str,
    state: str,
    advertised: bool,
    record: MigSwitch,
    now: datetime,
    timeout: timedelta,
    *,
    wrote: bool,
) -> MigProgress:
    keep = record if wrote else None
    late = now - record.since >= timeout
    where = f"{c.LABEL_MIG_CONFIG}={config}"
    if record.seen_working and state == SUCCESS:
        if advertised:
            return MigProgress(CONFIRMED, f"{where} is applied", keep)
        why = f"the MIG manager applied {where}, but the node does not advertise its resources yet"
        return MigProgress(NOT_ADVERTISED if late else WAITING, why, keep)
    if record.seen_working and state == FAILED:
        return MigProgress(
            FAILED_REASON,
            f"NVIDIA's MIG manager failed to apply {where} ({c.LABEL_MIG_CONFIG_STATE}=failed)",
            keep,
        )
    if not late:
        seen = state or "none"
        if record.seen_working:
            return MigProgress(
                WAITING, f"the MIG manager is applying {where} ({c.LABEL_MIG_CONFIG_STATE}={seen})", keep
            )
        return MigProgress(
            WAITING,
            f"waiting for the MIG manager to start on {where} "
            f"({c.LABEL_MIG_CONFIG_STATE}={seen} is from before)",
            keep,
        )
    return _stuck(where, state, record, timeout, keep)


def _stuck(
    where: str, state: str, record: MigSwitch, timeout: timedelta, keep: MigSwitch | None
) -> MigProgress:
    after = f"{int(timeout.total_seconds())}s after gpushare set {where}"
    if not record.seen_working:
        return MigProgress(
            STUCK,
            f"{after}, the MIG manager has not been seen working on it ({c.LABEL_MIG_CONFIG_STATE}="
            f"{state or 'none'}, from before the switch): is NVIDIA's MIG manager running on the node?",
            keep,
        )
    return MigProgress(STUCK, f"{after}, {c.LABEL_MIG_CONFIG_STATE} is still {state or 'none'}", keep)


def _with_operands(found: MigProgress, labels: Mapping[str, str]) -> MigProgress:
    """A switch failed or stuck that leaves operands ``paused-for-mig-change``: named for them
    (the device plugin, GPU Feature Discovery... do not come back by themselves)."""
    paused = paused_operands(labels)
    if not paused or found.reason not in (STUCK, FAILED_REASON):
        return found
    return MigProgress(
        OPERANDS_PAUSED, f"{found.message}; operands left {PAUSED}: {', '.join(paused)}", found.record
    )
