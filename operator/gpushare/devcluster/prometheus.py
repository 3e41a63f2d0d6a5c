"""A real Prometheus server (Debian's ``prometheus`` package, the binary users run) for the tests
and ``make demo``: the shipped alert rules, scraping the operator and the kube-apiserver.

- ``rule_file()``: the groups of ``manifests/monitoring/prometheusrule.yaml`` (a PrometheusRule CR)
  as the plain rule file a Prometheus without the Prometheus Operator loads.
- ``config()``: job ``gpushare-operator`` scrapes each operator replica's ``/metrics`` and each
  webhook's (the ports and path the ServiceMonitor selects, with its ``endpoint`` label; the job label
  is the one the ServiceMonitor's ``jobLabel`` gives), job ``apiserver`` the kube-apiserver's
  ``/metrics`` (the admission-webhook alerts read what it measures). Scrape and rule evaluation
  every second here, so an alert's expression shows up as ``pending`` within seconds.
- ``ServiceMonitorDiscovery``: where the operator runs in pods (the chart), the targets the
  Prometheus Operator's jobs for a ServiceMonitor find instead of static ones (the Services it
  selects, their EndpointSlices' named ports, the labels it sets: ``job`` from ``jobLabel``,
  ``endpoint``, ``namespace``, ``service``, ``pod``, ``container``), fed to Prometheus as file_sd
  targets: Debian's build has no Kubernetes service discovery.
- ``Prometheus``: start, wait ready, query (``/api/v1/query``, ``/alerts``, ``/rules``,
  ``/targets``), stop.
- ``panel_report()``: every dashboard panel query run against it: which return data.

``python -m gpushare.devcluster.prometheus up|down|panels`` is what ``hack/demo.sh`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "manifests" / "monitoring" / "prometheusrule.yaml"
DASHBOARD = REPO / "manifests" / "monitoring" / "dashboards" / "gpushare-operator.json"
#: The job label of the operator's targets: the ServiceMonitor's jobLabel (app.kubernetes.io/name).
OPERATOR_JOB = "gpushare-operator"


class PrometheusMissing(RuntimeError):
    """No prometheus server binary: install Debian's ``prometheus`` package (``make promtool``)."""


def find_prometheus() -> str:
    """$PROMETHEUS, else ``prometheus`` on PATH (Debian's package: /usr/bin/prometheus)."""
    exe = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    if not exe:
        for cand in ("/usr/bin/prometheus", "/usr/sbin/prometheus"):
            if Path(cand).is_file():
                return cand
        raise PrometheusMissing(
            "prometheus (the server) not found: run `make promtool` (installs Debian's prometheus "
            "package, which ships it) or set PROMETHEUS=/path/to/prometheus"
        )
    return exe


def rule_file(rules: Path = RULES) -> dict[str, Any]:
    """The PrometheusRule CR's ``spec.groups`` as a plain Prometheus rule file."""
    doc = yaml.safe_load(rules.read_text())
    return {"groups": doc["spec"]["groups"]}


@dataclass(frozen=True)
class APIServerTarget:
    """Where and how to scrape the kube-apiserver's /metrics (bearer token, cluster CA)."""

    server: str
    token_file: Path
    ca_file: Path


def config(
    operators: Sequence[str],
    rules_path: Path,
    apiserver: APIServerTarget | None = None,
    interval: str = "1s",
    webhooks: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The Prometheus configuration: ``operators`` are ``host:port`` of each replica's metrics,
    ``webhooks`` of each webhook process's (``gpushare webhook``); None: the operators' own, where
    ``gpushare run --webhook`` serves the webhook in the operator's process. Each target gets the
    ``endpoint`` label the ServiceMonitor's endpoints give (the port's name), as the alerts read it."""
    static = [{"targets": list(operators), "labels": {"endpoint": "metrics"}}]
    hooks = list(operators if webhooks is None else webhooks)
    if hooks:
        static.append({"targets": hooks, "labels": {"endpoint": "webhook-metrics"}})
    scrape: list[dict[str, Any]] = [
        {
            "job_name": OPERATOR_JOB,
            "metrics_path": "/metrics",
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": static,
        }
    ]
    if apiserver is not None:
        url = urllib.parse.urlsplit(apiserver.server)
        scrape.append(
            {
                "job_name": "apiserver",
                "scheme": url.scheme or "https",
                "metrics_path": "/metrics",
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "authorization": {"credentials_file": str(apiserver.token_file)},
                "tls_config": {"ca_file": str(apiserver.ca_file)},
                "static_configs": [{"targets": [url.netloc]}],
            }
        )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules_path)],
        "scrape_configs": scrape,
    }


def servicemonitor_target_groups(
    monitor: dict[str, Any],
    services: Sequence[dict[str, Any]],
    slices: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
) -> list[list[dict[str, Any]]]:
    """For each endpoint of the ServiceMonitor ``monitor`` (a manifest), the targets the Prometheus
    Operator's scrape job for it finds (``serviceDiscoveryRole: EndpointSlice``) among these
    Services, EndpointSlices and Pods (API objects as JSON), as file_sd target groups: every endpoint
    of the slices of the Services its ``selector.matchLabels`` picks in its namespaces, the named port
    only, not-ready and terminating endpoints included (only pods Failed or Succeeded are dropped),
    with the labels its relabelling sets: ``job`` (the Service's ``jobLabel`` label, else its name),
    ``endpoint`` (the port's name), ``namespace``, ``service``, ``pod`` and ``container`` (the
    container that has the port)."""
    spec = monitor["spec"]
    namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [monitor["metadata"]["namespace"]]
    match = (spec.get("selector") or {}).get("matchLabels") or {}
    job_label = spec.get("jobLabel")
    chosen = {
        (svc["metadata"]["namespace"], svc["metadata"]["name"]): svc
        for svc in services
        if svc["metadata"]["namespace"] in namespaces
        and all((svc["metadata"].get("labels") or {}).get(k) == v for k, v in match.items())
    }
    by_pod = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    out: list[list[dict[str, Any]]] = []
    for ep in spec["endpoints"]:
        groups: list[dict[str, Any]] = []
        for sl in slices:
            ns = sl["metadata"]["namespace"]
            svc_name = (sl["metadata"].get("labels") or {}).get("kubernetes.io/service-name", "")
            svc = chosen.get((ns, svc_name))
            if svc is None:
                continue
            job = (svc["metadata"].get("labels") or {}).get(job_label or "") or svc_name
            for port in sl.get("ports") or []:
                if port.get("name") != ep["port"]:
                    continue
                for endpoint in sl.get("endpoints") or []:
                    ref = endpoint.get("targetRef") or {}
                    pod = by_pod.get((ns, ref.get("name", ""))) if ref.get("kind") == "Pod" else None
                    if pod is not None and (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
                        continue
                    labels = {"job": job, "endpoint": ep["port"], "namespace": ns, "service": svc_name}
                    if pod is not None:
                        labels["pod"] = pod["metadata"]["name"]
                        for ctr in pod["spec"].get("containers") or []:
                            if any(cp.get("containerPort") == port["port"] for cp in ctr.get("ports") or []):
                                labels["container"] = ctr["name"]
                    groups.extend(
                        {"targets": [f"{addr}:{port['port']}"], "labels": dict(labels)}
                        for addr in endpoint.get("addresses") or []
                    )
        out.append(sorted(groups, key=lambda g: (g["targets"], sorted(g["labels"].items()))))
    return out


class ServiceMonitorDiscovery:
    """The Prometheus Operator's scrape jobs for a ServiceMonitor, on a Prometheus without Kubernetes
    service discovery. Debian's ``prometheus`` package is built without it (``promtool check config``:
    "field kubernetes_sd_configs not found in type config.ScrapeConfig"): here the discovery reads the
    Services, EndpointSlices and Pods of the monitor's namespaces from the API server every
    ``period_s`` and writes what :func:`servicemonitor_target_groups` makes of them to the file_sd
    files of :meth:`scrape_configs`' jobs (one per endpoint); the rest is Prometheus's own."""

    def __init__(
        self, monitor: dict[str, Any], apiserver: APIServerTarget, workdir: Path, period_s: float = 1.0
    ):
        self.monitor = monitor
        self.apiserver = apiserver
        self.dir = workdir
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.dir.mkdir(parents=True, exist_ok=True)

    def _file(self, i: int) -> Path:
        return self.dir / f"endpoint-{i}.json"

    def scrape_configs(self, interval: str = "1s") -> list[dict[str, Any]]:
        meta = self.monitor["metadata"]
        return [
            {
                "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
                "metrics_path": ep.get("path", "/metrics"),
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "file_sd_configs": [{"files": [str(self._file(i))], "refresh_interval": "1s"}],
            }
            for i, ep in enumerate(self.monitor["spec"]["endpoints"])
        ]

    def _list(self, path: str) -> list[dict[str, Any]]:
        req = urllib.request.Request(
            self.apiserver.server + path,
            headers={"Authorization": f"Bearer {self.apiserver.token_file.read_text().strip()}"},
        )
        ctx = ssl.create_default_context(cafile=str(self.apiserver.ca_file))
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return list(json.loads(resp.read())["items"])

    def refresh(self) -> list[list[dict[str, Any]]]:
        """List the objects once and rewrite the target files (atomically); returns the groups."""
        spec = self.monitor["spec"]
        namespaces = (spec.get("namespaceSelector") or {}).get("matchNames") or [
            self.monitor["metadata"]["namespace"]
        ]
        services, slices, pods = [], [], []
        for ns in namespaces:
            services += self._list(f"/api/v1/namespaces/{ns}/services")
            slices += self._list(f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices")
            pods += self._list(f"/api/v1/namespaces/{ns}/pods")
        groups = servicemonitor_target_groups(self.monitor, services, slices, pods)
        for i, targets in enumerate(groups):
            tmp = self._file(i).with_suffix(".tmp")
            tmp.write_text(json.dumps(targets, indent=1))
            tmp.replace(self._file(i))
        return groups

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except (OSError, ValueError, KeyError) as exc:
                self.errors.append(repr(exc))
            self._stop.wait(self.period_s)

    def start(self) -> None:
        """One refresh now (errors raise), then one every ``period_s`` in a thread."""
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="servicemonitor-discovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)


@dataclass
class Prometheus:
    """A prometheus process with its config, data and log under ``dir``."""

    dir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.dir / "prometheus.log"

    @classmethod
    def start(
        cls,
        workdir: Path,
        port: int,
        operators: Sequence[str],
        apiserver: APIServerTarget | None = None,
        *,
        interval: str = "1s",
        detach: bool = False,
        webhooks: Sequence[str] | None = None,
        scrape_configs: Sequence[dict[str, Any]] | None = None,
        rule_groups: dict[str, Any] | None = None,
    ) -> Prometheus:
        """``webhooks``: as :func:`config`. ``scrape_configs``: these jobs instead of the static ones
        (e.g. :func:`servicemonitor_scrape_configs`); ``operators`` is then unused. ``rule_groups``:
        this rule file (as :func:`rule_file` reads one) instead of the shipped one."""
        exe = find_prometheus()
        workdir.mkdir(parents=True, exist_ok=True)
        rules = workdir / "gpushare-rules.yaml"
        rules.write_text(yaml.safe_dump(rule_groups or rule_file(), sort_keys=False))
        cfg = workdir / "prometheus.yml"
        conf = config(operators, rules, apiserver, interval, webhooks)
        if scrape_configs is not None:
            conf["scrape_configs"] = list(scrape_configs)
        cfg.write_text(yaml.safe_dump(conf, sort_keys=False))
        cmd = [
            exe,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        ]
        with (workdir / "prometheus.log").open("ab") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
            )
        prom = cls(workdir, port, proc, proc.pid)
        (workdir / "prometheus.pid").write_text(f"{proc.pid}\n")
        (workdir / "prometheus.url").write_text(prom.url + "\n")
        prom.wait_ready()
        return prom

    def wait_ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"prometheus not ready in {timeout_s:g}s: {self.log_path.read_text()[-2000:]}"
                )
            time.sleep(0.2)

    def get(self, path: str, **params: str) -> Any:
        """``GET /api/v1/<path>``'s ``data`` (RuntimeError when the status is not success)."""
        query = ("?" + urllib.parse.urlencode(params)) if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus /api/v1/{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or a scalar as one sample) ``expr`` evaluates to now."""
        data = self.get("query", query=expr)
        if data["resultType"] == "vector":
            return list(data["result"])
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        raise RuntimeError(f"{expr}: a {data['resultType']}, not an instant vector")

    def alerts(self) -> list[dict[str, Any]]:
        """``/api/v1/alerts``: the pending and firing alerts, each with its labels and state."""
        return list(self.get("alerts")["alerts"])

    def alert_states(self, name: str) -> dict[str, str]:
        """{pool or instance or name label (``-`` when none): state} of the alerts called ``name``."""
        out = {}
        for a in self.alerts():
            labels = a["labels"]
            if labels.get("alertname") == name:
                key = labels.get("pool") or labels.get("instance") or labels.get("name") or "-"
                out[key] = a["state"]
        return out

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self.get("rules")["groups"])

    def evaluated_after(self, group: str, t: float) -> bool:
        """Whether the rule group ``group`` has had an evaluation that saw every sample stored by
        ``t`` (Unix seconds): what ``/api/v1/alerts`` shows then reflects those samples.

        ``/api/v1/rules`` gives the wall-clock start of the group's last finished evaluation; the
        time its queries ran at is the interval tick before that start (within one interval, the
        scheduler's delay aside). A start at least two intervals after ``t`` has that tick after
        ``t``."""
        for g in self.rule_groups():
            if g["name"] == group:
                # RFC 3339 with nanoseconds, as Go writes it (fromisoformat keeps microseconds).
                started = datetime.fromisoformat(str(g["lastEvaluation"])).timestamp()
                return started >= t + 2 * float(g["interval"])
        raise RuntimeError(f"prometheus has no rule group {group!r}")

    def targets(self) -> list[dict[str, Any]]:
        return list(self.get("targets")["activeTargets"])

    def stop(self) -> None:
        pid = self.proc.pid if self.proc is not None else self.pid
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if self.proc is not None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            return
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)


def dashboard_queries(dashboard: Path = DASHBOARD, rate_interval: str = "1m") -> list[tuple[str, str]]:
    """(panel title, query) for every target of every panel, with Grafana's variables filled in:
    ``$__rate_interval`` -> ``rate_interval``, ``$pool`` -> ``.*`` (the variable's All)."""
    out = []
    for panel in json.loads(dashboard.read_text())["panels"]:
        for target in panel.get("targets") or []:
            expr = str(target["expr"]).replace("$__rate_interval", rate_interval).replace("$pool", ".*")
            out.append((str(panel["title"]), expr))
    return out


def panel_report(
    prom: Prometheus, start: float, end: float, dashboard: Path = DASHBOARD, rate_interval: str = "1m"
) -> dict[str, list[int]]:
    """{panel title: [series each of its queries returned]}, each run as the dashboard runs it: a
    range query over ``start``..``end`` (Unix seconds), a point every 5s."""
    report: dict[str, list[int]] = {}
    for title, expr in dashboard_queries(dashboard, rate_interval):
        data = prom.get("query_range", query=expr, start=f"{start:.0f}", end=f"{end:.0f}", step="5")
        report.setdefault(title, []).append(len(data["result"]))
    return report


def format_panel_report(report: dict[str, list[int]], why_empty: Mapping[str, str] | None = None) -> str:
    """One line per panel; an empty panel with its reason from ``why_empty`` (title: why nothing in
    the scenario feeds it), or marked as having none: it should have had data."""
    why = dict(why_empty or {})
    empty = [t for t, counts in report.items() if not any(counts)]
    unexplained = [t for t in empty if t not in why]
    lines = [
        f"dashboard panels: {len(report) - len(empty)}/{len(report)} return data ({len(empty)} empty:"
        f" {len(empty) - len(unexplained)} by design, {len(unexplained)} without a reason)"
    ]
    for title, counts in report.items():
        line = f"  {'data ' if any(counts) else 'EMPTY'} {title}: series per query {counts}"
        if not any(counts):
            line += f" (empty by design: {why[title]})" if title in why else " (NO REASON: should have data)"
        lines.append(line)
    return "\n".join(lines)


def _pid_of(workdir: Path) -> int | None:
    try:
        pid = int((workdir / "prometheus.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpushare.devcluster.prometheus")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start prometheus in the background (pid and URL files in --dir)")
    up.add_argument("--dir", type=Path, required=True)
    up.add_argument("--port", type=int, default=9090)
    up.add_argument(
        "--operator", action="append", default=[], metavar="HOST:PORT", help="a replica's metrics"
    )
    up.add_argument(
        "--webhook",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a webhook process's metrics (gpushare webhook); none: the --operator replicas serve them",
    )
    up.add_argument(
        "--cluster-dir", type=Path, help="the devcluster's directory: also scrape its kube-apiserver"
    )
    up.add_argument("--interval", default="5s")
    down = sub.add_parser("down", help="stop the prometheus started by up")
    down.add_argument("--dir", type=Path, required=True)
    panels = sub.add_parser("panels", help="run every dashboard query; print which return data")
    panels.add_argument("--url", required=True)
    panels.add_argument("--since", type=float, default=900, help="seconds back from now (default 900)")
    panels.add_argument(
        "--empty-by-design",
        action="append",
        default=[],
        metavar="TITLE=WHY",
        help="a panel the scenario feeds nothing, and why (printed beside it when it is empty)",
    )
    scraped = sub.add_parser(
        "scraped",
        help="exit 0 once every series of --series has at least --samples samples in Prometheus, else 1",
    )
    scraped.add_argument("--url", required=True)
    scraped.add_argument("--series", required=True, help='a series selector, e.g. up{job="x"}')
    scraped.add_argument("--samples", type=int, default=2)
    args = parser.parse_args(argv)
    if args.cmd == "scraped":
        port = int(urllib.parse.urlsplit(args.url).port or 80)
        data = Prometheus(Path(), port).get("query", query=f"count_over_time({args.series}[15m])")
        counts = [float(r["value"][1]) for r in data["result"]]
        return 0 if counts and min(counts) >= args.samples else 1
    if args.cmd == "up":
        apiserver = None
        if args.cluster_dir:
            info = json.loads((args.cluster_dir / "cluster.json").read_text())
            token = args.dir / "apiserver.token"
            args.dir.mkdir(parents=True, exist_ok=True)
            token.write_text(info["token"])
            token.chmod(0o600)
            apiserver = APIServerTarget(info["server"], token, Path(info["ca_path"]))
        prom = Prometheus.start(
            args.dir,
            args.port,
            args.operator,
            apiserver,
            interval=args.interval,
            detach=True,
            webhooks=args.webhook or None,
        )
        print(prom.url)
        return 0
    if args.cmd == "down":
        pid = _pid_of(args.dir)
        if pid is not None:
            Prometheus(args.dir, 0, pid=pid).stop()
            print(f"# stopped prometheus (pid {pid})", file=sys.stderr)
        (args.dir / "prometheus.pid").unlink(missing_ok=True)
        return 0
    port = int(urllib.parse.urlsplit(args.url).port or 80)
    now = time.time()
    report = panel_report(Prometheus(Path(), port), now - args.since, now)
    why = {title: reason for title, _, reason in (x.partition("=") for x in args.empty_by_design)}
    print(format_panel_report(report, why))
    return 0


if __name__ == "__main__":
    sys.exit(main())
