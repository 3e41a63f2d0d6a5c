"""The NVIDIA gate (``gpushare.webhook.gate``): open while an NVIDIA pool exists, closed otherwise.

Every GPUSharePool event (the initial listing included: Kopf calls handlers once its pool index is
complete) and a timer per pool call ``NvidiaGate.sync`` with every pool of the index; it reads and
writes the ValidatingWebhookConfiguration only when the gate it wants changed, or every
``GATE_RESYNC`` seconds. Under peering only the replica that reconciles runs these handlers.
"""

from __future__ import annotations

from typing import Any

import kopf

from gpushare import constants as c
from gpushare.handlers.pools import PoolIndex, _values
from gpushare.handlers.state import OperatorState
from gpushare.webhook.gate import GATE_RESYNC


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, id="nvidia-gate")  # type: ignore[arg-type]
async def nvidia_gate(memo: OperatorState, gpushare_pools: PoolIndex, **_: Any) -> None:
    """A pool appeared, changed or is gone: the gate may have to open or close."""
    if memo.gate is not None:
        await memo.gate.sync(_values(gpushare_pools))


@kopf.timer(c.GROUP, c.VERSION, c.PLURAL, id="nvidia-gate-resync", interval=GATE_RESYNC)  # type: ignore[arg-type]
async def nvidia_gate_resync(memo: OperatorState, gpushare_pools: PoolIndex, **_: Any) -> None:
    """Look again now and then: a ``helm upgrade`` re-renders the shipped condition (gate closed)."""
    if memo.gate is not None:
        await memo.gate.sync(_values(gpushare_pools))
