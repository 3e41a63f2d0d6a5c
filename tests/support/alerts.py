"""Reading alerts back from a live Prometheus (``gpushare.devcluster.prometheus``) while a test
causes their conditions: wait for an alert to be pending, then gone, and keep the table (alert, cause,
seen pending, cleared) the note quotes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpushare.devcluster import wait_for
from gpushare.devcluster.prometheus import Prometheus


def report(suffix: str, text: str) -> None:
    """Print ``text``; also write it to $GPUSHARE_ALERTS_REPORT + ``suffix`` when that is set."""
    print("\n" + text)
    if os.environ.get("GPUSHARE_ALERTS_REPORT"):
        Path(os.environ["GPUSHARE_ALERTS_REPORT"] + suffix).write_text(text + "\n")


@dataclass
class Row:
    alert: str
    cause: str
    pending: list[str] = field(default_factory=list)
    cleared: bool = False


class Scenario:
    def __init__(self, prom: Prometheus, not_caused: Mapping[str, str] | None = None) -> None:
        self.prom = prom
        self.rows: list[Row] = []
        self.not_caused = dict(not_caused or {})

    async def pending(self, alert: str, cause: str, key: str, timeout_s: float = 120) -> Row:
        """Wait until ``alert`` for ``key`` (pool, instance, or webhook name) is pending or firing."""

        async def seen() -> str | None:
            states = await asyncio.to_thread(self.prom.alert_states, alert)
            return states.get(key) if states.get(key) in ("pending", "firing") else None

        state = await wait_for(seen, what=f"{alert} pending for {key} ({cause})", timeout_s=timeout_s)
        row = next((r for r in self.rows if r.alert == alert and r.cause == cause), None)
        if row is None:
            row = Row(alert, cause)
            self.rows.append(row)
        row.pending.append(f"{key}: {state}")
        return row

    async def cleared(self, row: Row, key: str, timeout_s: float = 120) -> None:
        async def gone() -> bool:
            return key not in await asyncio.to_thread(self.prom.alert_states, row.alert)

        await wait_for(
            gone, what=f"{row.alert} inactive for {key} after the cause was removed", timeout_s=timeout_s
        )
        row.cleared = True

    def absent(self, alert: str) -> None:
        states = self.prom.alert_states(alert)
        assert not states, f"{alert} should not be active: {states}"

    def table(self) -> str:
        lines = ["| alert | cause | seen pending | cleared |", "|---|---|---|---|"]
        lines.extend(
            f"| {r.alert} | {r.cause} | {'; '.join(r.pending)} | {'yes' if r.cleared else 'NO'} |"
            for r in self.rows
        )
        lines.extend(f"| {alert} | not caused: {why} | - | - |" for alert, why in self.not_caused.items())
        return "\n".join(lines)
