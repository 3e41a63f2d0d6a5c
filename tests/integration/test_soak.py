"""The short soak (``gpushare.devcluster.soak``, docs/how-to/soak.md): a fixed seed's minute of pool
edits, GPU pods and overlapping faults (operator replicas SIGKILLed and SIGSTOPped, the webhook
process SIGKILLed, kube-apiserver SIGKILLed and restarted, etcd paused, device plugin pods deleted,
every connection of the replicas and the webhook to the apiserver cut mid-stream),
then every invariant checked against the cluster and the apiserver's audit log.

It runs on a control plane of its own, not the session's: it kills that apiserver and pauses that
etcd, and its apiserver writes an audit log and knows the operator and the webhook as users of
their own (docs/how-to/soak.md says what that costs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpushare.devcluster import BinariesMissing, find_binaries
from gpushare.devcluster.soak import FAULTS, INVARIANTS, WORK, run_soak

SEED = 315
SECONDS = 60.0


def test_short_soak_keeps_every_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    lines: list[str] = []
    report = run_soak(SEED, SECONDS, tmp_path / "soak", out=lines.append)
    text = report.text()
    with capsys.disabled():
        print("\n" + text)
    assert not report.violations, text
    # every kind of work and fault ran, and the edits went both ways
    assert {k for k in (*WORK, *FAULTS) if report.done[k] == 0} == set(), text
    for kinds, ways in (
        (("ack-mode",), {"cgpu->share", "share->cgpu", "core_mem->cgpu", "cgpu->core_mem"}),
        # NVIDIA's sharing turned on by nvidia-mode, or by nvidia-replicas on a pool without it
        (("nvidia-mode", "nvidia-replicas"), {"TimeSlicing->None", "None->TimeSlicing"}),
    ):
        done = {k.split()[1] for k in report.detail if k.split()[0] in kinds}
        assert ways <= done <= ways | {"TimeSlicing->TimeSlicing"}, text
    # each invariant was checked against something
    unchecked = [inv.split(":", 1)[0] for inv in INVARIANTS if not report.checked.get(inv.split(":", 1)[0])]
    assert unchecked == [], text
    assert lines[0].startswith(f"schedule (seed {SEED}, ")
