"""``gpushare run`` as a subprocess: start it, read its metrics and JSON log, stop it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpushare.devcluster.cluster import free_port

#: The histogram of reconcile passes; its ``_count`` sample per pool counts the passes run.
PASS_COUNT = "gpushare_reconcile_duration_seconds_count"


def samples(text: str) -> Iterator[Sample]:
    """Every sample of a Prometheus text exposition."""
    for family in text_string_to_metric_families(text):
        yield from family.samples


def sum_samples(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` (e.g. ``x_total``) whose labels include ``labels``."""
    return sum(
        s.value
        for s in samples(text)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


@dataclass
class OperatorProc:
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
        return text

    def sum_metric(self, name: str, **labels: str) -> float:
        """The sum of the operator's samples called ``name`` whose labels include ``labels``."""
        return sum_samples(self.metrics_text(), name, **labels)

    def passes(self, pool: str) -> int:
        """How many reconcile passes of ``pool`` this operator has finished."""
        return int(self.sum_metric(PASS_COUNT, pool=pool))

    def wait_serving(self, timeout_s: float = 30.0) -> None:
        """Until the metrics endpoint answers; AssertionError (with the log) if the process exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"gpushare run exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}"
                )
            try:
                self.metrics_text()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(
            f"gpushare run did not serve metrics in {timeout_s:g}s:\n{self.log_path.read_text()[-3000:]}"
        )

    def logs(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def launch_operator(kubeconfig: Path, log_path: Path, *extra: str, port: int | None = None) -> OperatorProc:
    """Start ``gpushare run`` (JSON log to ``log_path``, metrics on ``port``, default a free one);
    does not wait."""
    port = port or free_port()
    cmd = [
        sys.executable, "-m", "gpushare", "run",
        "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(port),
        "--log-format", "json",
        *extra,
    ]  # fmt: skip
    with log_path.open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    return OperatorProc(proc, log_path, port)


def launch_webhook(
    kubeconfig: Path, workdir: Path, namespace: str, configuration: str
) -> tuple[subprocess.Popen[bytes], int, Path]:
    """Start ``gpushare webhook --webhook-local`` in its own session (a free webhook and metrics
    port, certificates under ``workdir/certs``, log ``workdir/webhook.log``); does not wait.
    Returns the process, its metrics port and its log."""
    log = workdir / "webhook.log"
    metrics_port = free_port()
    cmd = [
        sys.executable, "-m", "gpushare", "webhook", "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(metrics_port), "--webhook-local", "--webhook-port", str(free_port()),
        "--webhook-namespace", namespace, "--webhook-configuration", configuration,
        "--webhook-cert-dir", str(workdir / "certs"),
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, metrics_port, log
