"""Collection rules shared by every test directory.

tests/e2e/ runs only against a deployed cluster (``make e2e-kind`` sets GPUSHARE_E2E=1 and
KUBECONFIG). Without GPUSHARE_E2E it is not collected at all, so ``make test`` neither runs it nor
reports it as skipped or passed.
"""

from __future__ import annotations

import os

collect_ignore: list[str] = [] if os.environ.get("GPUSHARE_E2E") == "1" else ["e2e"]
