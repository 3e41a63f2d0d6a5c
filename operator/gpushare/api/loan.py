"""The ``gpushare.io/loan`` annotation of a lent node (:class:`LoanRecord`): which pool lent it to
which. The lending loop writes and removes it; the planner puts a lent node in its borrower; the
admission rules see that a lent node, labelled with its borrower's name, still belongs to its
lender."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoanRecord:
    """``ANNOTATION_LOAN``: the node, selected by pool ``lender``, is lent to pool ``borrower``.

    While the lender still selects the node and the borrower is a live pool, the planner puts the
    node in the borrower (its labels, a plugin restart); otherwise the annotation is ignored and the
    node is planned by the selectors alone (it goes back). Written and removed by the lending loop.
    """

    lender: str
    borrower: str
    since: str = ""
    #: The node's GPUs when it was lent (count, gpu-mem per GPU, its unit): the lending loop counts
    #: them for the borrower while the node's plugin restarts (and advertises nothing).
    gpus: int = 0
    gpu_mem: int = 0
    unit: str = "GiB"

    @classmethod
    def parse(cls, raw: str | None) -> LoanRecord | None:
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            lender, borrower = data["from"], data["to"]
            if not isinstance(lender, str) or not isinstance(borrower, str) or not lender or not borrower:
                return None
            return cls(
                lender,
                borrower,
                str(data.get("since") or ""),
                int(data.get("gpus") or 0),
                int(data.get("gpuMem") or 0),
                "MiB" if data.get("unit") == "MiB" else "GiB",
            )
        except (ValueError, KeyError, TypeError):
            return None

    def dump(self) -> str:
        body: dict[str, Any] = {"from": self.lender, "to": self.borrower, "since": self.since}
        if self.gpus:
            body.update({"gpus": self.gpus, "gpuMem": self.gpu_mem, "unit": self.unit})
        return json.dumps(body, sort_keys=True, separators=(",", ":"))
