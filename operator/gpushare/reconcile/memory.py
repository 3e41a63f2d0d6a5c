"""What the reconciler remembers between passes, beside the store: each pool's reports and the
plugin restarts this replica moved (all lost on a restart, which the phases allow for)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpushare.policy.events import Reported


@dataclass
class ReportMemory:
    """A pool's last status written, when, and what its Events reported."""

    status: dict[str, Any] | None = None
    written_at: datetime | None = None
    reported: Reported = field(default_factory=Reported)


@dataclass
class RestartMemory:
    """What this replica did for restarts (lost on a restart, which the step allows for)."""

    #: node -> ``since`` of the restart whose plugin pods we deleted there
    deleted_since: dict[str, str] = field(default_factory=dict)
    deleted_uids: set[str] = field(default_factory=set)
    #: when this replica first moved restarts
    took_over_at: datetime | None = None
