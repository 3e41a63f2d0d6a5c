"""The NVIDIA gate over the API: the operator opens it while an NVIDIA pool exists, closes it when
none does (the decision: ``gpushare.admission.gate``).

``ensure_nvidia_gate`` is one read-decide-write step on the ValidatingWebhookConfiguration: read
it, ``gate_patch``, and one JSON patch guarded by the resourceVersion that was read (a concurrent
writer, e.g. the webhook keeping caBundle current, makes it read and decide again). ``NvidiaGate``
is what the operator's pool handlers call (``gpushare.handlers.gate``): it looks again only when the
gate it wants changed, or every ``resync`` seconds (a ``helm upgrade`` re-renders the shipped,
closed condition), and logs each change once.

RBAC: get and patch on that one configuration (by resourceName), which the operator already has
for the caBundle. A configuration that does not exist (no webhook installed) is left alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpushare.admission.gate import check_due, gate_patch, gate_wanted
from gpushare.admission.webhook_config import WebhookTarget
from gpushare.k8s import ApiUnavailable, Conflict, webhook_api
from gpushare.k8s.client import ApiClient
from gpushare.k8s.retry import REPLAN_BACKOFF, Backoff, replan
from gpushare.k8s.webhook_api import WebhookCertError

logger = logging.getLogger("gpushare.webhook.gate")

#: Seconds between the operator's looks at the gate while nothing changes (after a ``helm upgrade``
#: closed it again, it is open again within this time).
GATE_RESYNC = 60.0


@dataclass(frozen=True)
class GateOutcome:
    """What ``ensure_nvidia_gate`` found or did: ``opened``, ``closed``, ``unchanged`` or
    ``absent`` (no such configuration), and the entries whose condition gpushare did not write."""

    result: str
    foreign: tuple[str, ...] = ()


async def ensure_nvidia_gate(
    api: ApiClient,
    name: str,
    open_: bool,
    targets: Sequence[WebhookTarget],
    *,
    backoff: Backoff = REPLAN_BACKOFF,
) -> GateOutcome:
    """Open (``open_``) or close the NVIDIA gate of ValidatingWebhookConfiguration ``name``."""

    async def step() -> GateOutcome:
        current = await webhook_api.read_configuration(api, name)
        if current is None:
            return GateOutcome("absent")
        patch = gate_patch(current, open_, targets)
        if not patch.ops:
            return GateOutcome("unchanged", patch.foreign)
        await webhook_api.patch_configuration(api, name, patch.ops)
        return GateOutcome("opened" if open_ else "closed", patch.foreign)

    try:  # another writer moved it: read again
        return await replan(step, what=f"ValidatingWebhookConfiguration {name}", backoff=backoff)
    except Conflict as exc:
        raise WebhookCertError(str(exc)) from None


class NvidiaGate:
    """The operator's keeper of the gate (one per process; its pool handlers call ``sync``)."""

    def __init__(
        self,
        api: ApiClient,
        configuration: str,
        targets: Sequence[WebhookTarget],
        *,
        resync: float = GATE_RESYNC,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.configuration = configuration
        self.targets = tuple(targets)
        self.resync = resync
        self.clock = clock
        #: The gate last decided (written, found so, or tried: a failure waits for ``resync`` or a
        #: change of what is wanted, not for the next pool event); None: not looked yet.
        self.decided: bool | None = None
        self.checked: float | None = None
        self._lock = asyncio.Lock()
        self._reported: tuple[Any, ...] | None = None

    async def sync(self, pools: Iterable[Mapping[str, Any]]) -> GateOutcome | None:
        """Open or close the gate as ``pools`` (every GPUSharePool, as JSON) want it, when due
        (``check_due``); None when not due. Failures are logged (once each) and retried on the next
        call, never raised: the gate is an optimisation of what reaches the webhook."""
        want = gate_wanted(pools)
        async with self._lock:
            if not check_due(want, self.decided, self.checked, self.clock(), self.resync):
                return None
            self.checked = self.clock()
            self.decided = want
            try:
                outcome = await ensure_nvidia_gate(self.api, self.configuration, want, self.targets)
            except (WebhookCertError, ApiUnavailable) as exc:
                self._report(
                    ("failed", str(exc)),
                    logging.WARNING,
                    "Could not %s the NVIDIA gate of ValidatingWebhookConfiguration %s (will retry): %s",
                    "open" if want else "close",
                    self.configuration,
                    exc,
                )
                return None
            if outcome.result in ("opened", "closed"):
                logger.info(
                    "NVIDIA gate %s on ValidatingWebhookConfiguration %s: nvidia.com/gpu pods with node "
                    "constraints are %s to the webhook",
                    outcome.result,
                    self.configuration,
                    "sent" if want else "no longer sent",
                )
            if outcome.foreign:
                self._report(
                    ("foreign", outcome.foreign),
                    logging.WARNING,
                    "ValidatingWebhookConfiguration %s: the asks-for-gpu-sharing condition of %s is not "
                    "one gpushare wrote (edited, or another gpushare version's); its NVIDIA gate is left "
                    "as it is",
                    self.configuration,
                    ", ".join(outcome.foreign),
                )
            elif outcome.result == "absent":
                self._report(
                    ("absent",),
                    logging.INFO,
                    "No ValidatingWebhookConfiguration %s: no NVIDIA gate to keep",
                    self.configuration,
                )
            else:
                self._reported = None
            return outcome

    def _report(self, key: tuple[Any, ...], level: int, msg: str, *args: Any) -> None:
        """Log ``msg`` unless the same report was the last one (no line a minute while it lasts)."""
        if key != self._reported:
            self._reported = key
            logger.log(level, msg, *args)
