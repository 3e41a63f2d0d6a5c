"""Hostile input against the running webhook (``gpushare run --webhook``: the reconciler's process
and event loop): each input gets a 4xx (or a proper AdmissionReview), never a 5xx, and valid
reviews sent at the same time are answered with their verdict. docs/security.md.

"At the same time" is made by events, not sleeps: the hostile request is sent all but its last
byte (the server has its head and most of its body, and cannot answer it yet); only then do the
valid reviews start, and the hostile request is completed once one of them has been answered.
Then, right after its last byte, while the server checks, parses and judges it, a valid review
is sent and must be answered within ``JUDGED_S``; the reviews keep going, one after another,
until the hostile answer is read.

No timing is asserted: socket timeouts catch a hang or a blocked loop (a hostile request used to
hold the loop for 15 s and more; ``JUDGED_S`` is broken by a loop that judges a body for seconds,
and is many times a review's latency on a busy machine); the latencies measured are printed
(``-s``) for the record.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import secrets
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare.admission.webhook_config import TARGETS
from gpushare.devcluster import ClusterInfo
from gpushare.devcluster.cluster import free_port
from support.kube import Kube
from support.operator_proc import OperatorProc, launch_operator

pytestmark = pytest.mark.integration

EX = Path(__file__).resolve().parents[2] / "examples"
SUFFIX = secrets.token_hex(3)
NS = f"gpushare-hostile-{SUFFIX}"
MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
#: Hang detectors, not timings (the tests assert answers, never speed): a hostile request still
#: unanswered after HOSTILE_S, or a valid review sent meanwhile after VALID_S, fails with a socket
#: timeout. Both used to hang (15 s and more); the latencies are printed, and measured in milliseconds.
HOSTILE_S = 10.0
VALID_S = 5.0
#: A valid review sent after the hostile body's last byte, while the server judges that body, is
#: answered within this or fails: the loop must not judge a large body itself (a loop blocked for
#: a few seconds breaks it; a review takes milliseconds, tens while the worker thread parses).
JUDGED_S = 2.0


@dataclass
class Served:
    proc: OperatorProc
    port: int
    cafile: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None, timeout: float = 30
    ) -> tuple[int, Any, float]:
        """``(status, JSON body or None, seconds)``."""
        req = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}", data=body, method="POST",
            headers={"Content-Type": "application/json", **(headers or {})},
        )  # fmt: skip
        started = time.monotonic()
        try:
            with urllib.request.urlopen(req, context=self.context(), timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                status, raw = exc.code, exc.read()
        elapsed = time.monotonic() - started
        try:
            return status, json.loads(raw), elapsed
        except ValueError:
            return status, None, elapsed

    def raw_connection(self) -> ssl.SSLSocket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        return self.context().wrap_socket(sock, server_hostname="127.0.0.1")


def review(obj: Any, *, uid: str = "u-1", resource: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "resource": resource or {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "userInfo": {"username": "test"},
            "object": obj,
        },
    }


def pod(limits: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
        },
    }


VALID = json.dumps(review(pod({MEM: "2", CORE: "30"}))).encode()
BAD_33 = json.dumps(review(pod({MEM: "2", CORE: "33"}))).encode()


@pytest.fixture(scope="module")
def served(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    kube = Kube(cluster)
    r = kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, dry_run=False)
    assert r.status == 201, r.body
    tmp = tmp_path_factory.mktemp("hostile")
    port = free_port()
    proc = launch_operator(
        cluster.kubeconfig, tmp / "operator.log",
        "--webhook", f"--webhook-port={port}", "--webhook-local", f"--webhook-namespace={NS}",
        "--webhook-no-configuration",  # reviews are posted straight to it: nothing in the cluster calls it
        f"--webhook-cert-dir={tmp / 'certs'}",
    )  # fmt: skip
    try:
        proc.wait_serving(timeout_s=60)
        s = Served(proc, port, tmp / "certs" / "ca.crt")
        deadline = time.monotonic() + 60
        while True:  # until the direct path answers with the rules (the indexes are handed over)
            try:
                status, body, _ = s.post("/validate-pods", BAD_33, timeout=5)
                if status == 200 and "GS001" in json.dumps(body):
                    break
            except OSError:
                pass
            assert proc.proc.poll() is None, (tmp / "operator.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the webhook never answered"
            time.sleep(0.5)
        yield s
        log = (tmp / "operator.log").read_text(errors="replace")
        assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:3000]
        assert proc.proc.poll() is None, log[-3000:]
    finally:
        proc.stop()
        kube.request("DELETE", f"/api/v1/namespaces/{NS}")


class InFlight:
    """A request sent all but its last body byte: the server has its head and most of its body,
    and cannot answer it until ``send_rest()`` sends the rest."""

    def __init__(self, served: Served, path: str, body: bytes) -> None:
        assert body, "a request in flight needs a body to hold back"
        self.conn = http.client.HTTPSConnection(
            "127.0.0.1", served.port, context=served.context(), timeout=HOSTILE_S
        )
        self.conn.putrequest("POST", path, skip_accept_encoding=True)
        self.conn.putheader("Content-Type", "application/json")
        self.conn.putheader("Content-Length", str(len(body)))
        self.conn.endheaders()
        self.started = time.monotonic()
        self.conn.send(body[:-1])
        self.rest = body[-1:]

    def send_rest(self) -> None:
        """Send the last byte: from now on the server checks, parses and judges the body."""
        self.conn.send(self.rest)

    def answer(self) -> tuple[int, Any, float]:
        """``(status, JSON body or None, seconds since the first byte)``, once ``send_rest``."""
        try:
            resp = self.conn.getresponse()
            status, raw = resp.status, resp.read()
        finally:
            self.conn.close()
        elapsed = time.monotonic() - self.started
        try:
            return status, json.loads(raw), elapsed
        except ValueError:
            return status, None, elapsed


@dataclass
class Probes:
    """The valid reviews sent while a hostile request was in flight."""

    latencies: list[float]
    #: answered while the hostile request was held back a byte short
    while_held: int
    #: sent after its last byte (while it was being judged), answered before its answer was read
    while_judged: int
    #: the latency of the review sent right after the last byte, before anything else
    first_judged: float = 0.0


def while_valid_reviews(
    served: Served, hostile: list[InFlight]
) -> tuple[list[tuple[int, Any, float]], Probes]:
    """Valid reviews, one after another, from the moment the ``hostile`` requests are in flight
    until their answers are read; ``(their answers, the probes)``. The hostile requests are
    completed only once a valid review has been answered, so at least one overlaps them held; then
    one is sent right after their last bytes, while the server judges them, and must be answered
    within ``JUDGED_S`` (as must every other review sent after the last bytes). Every valid review
    must get its proper answer."""
    probes = Probes([], 0, 0)
    phase = ["held"]
    overlapped = threading.Event()
    done = threading.Event()

    def post_valid(timeout: float) -> float:
        status, body, elapsed = served.post("/validate-pods", VALID, timeout=timeout)
        assert status == 200 and body["response"]["allowed"] is True, (status, body)
        probes.latencies.append(elapsed)
        return elapsed

    def probe() -> None:
        while not done.is_set():
            sent_in = phase[0]
            try:
                post_valid(JUDGED_S if sent_in == "judged" else VALID_S)
            except OSError as exc:  # a socket timeout, bare or in a URLError
                raise AssertionError(
                    f"a valid review sent while the hostile body was {sent_in} was not answered: {exc}"
                ) from None
            if done.is_set():
                break
            if sent_in == "held" and phase[0] == "held":
                probes.while_held += 1
            elif sent_in == "judged":
                probes.while_judged += 1
            overlapped.set()

    with concurrent.futures.ThreadPoolExecutor(1 + len(hostile)) as pool:
        prober = pool.submit(probe)  # the hostile requests are in flight: InFlight sent them
        try:
            if not overlapped.wait(VALID_S):  # a hang detector, not a timing
                if prober.done():
                    prober.result()  # the probe's own failure
                pytest.fail("no valid review was answered while the hostile request was in flight")
            phase[0] = "judged"
            for request in hostile:
                request.send_rest()
            # The loop is judging (or handing to the worker) the hostile bodies now: a review sent
            # this instant waits behind that work if the loop does it itself.
            try:
                probes.first_judged = post_valid(JUDGED_S)
            except OSError as exc:  # a socket timeout, bare or in a URLError
                pytest.fail(
                    f"a valid review sent right after the hostile body's last byte got no answer within"
                    f" {JUDGED_S} s ({exc}): the event loop is busy judging the hostile body"
                )
            probes.while_judged += 1
            answers = list(pool.map(InFlight.answer, hostile))
        finally:
            done.set()
        prober.result()
    assert probes.while_held >= 1 and probes.while_judged >= 1, probes
    return answers, probes


def show(name: str, elapsed: float, probes: Probes) -> None:
    print(
        f"{name}: answered in {elapsed * 1000:.1f} ms; valid reviews answered while it was in flight:"
        f" {probes.while_held} while held a byte short, {probes.while_judged} after its last byte"
        f" (the first in {probes.first_judged * 1000:.1f} ms); slowest {max(probes.latencies) * 1000:.1f} ms"
    )


ESCAPES_48K = b'{"kind":"AdmissionReview","x":"' + b'\\"' * 24000 + b"[" * 201
BRACKETS_1M = b"[" * (1024 * 1024)
BRACKETS_UNDER_CAP = b'{"kind":"AdmissionReview","x":' + b"[" * 500_000 + b"]" * 10
DEEP_100K = b'{"kind":"AdmissionReview","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
DEEP_OBJECTS = b'{"kind":"AdmissionReview","x":' + b'{"a":' * 80_000 + b"1" + b"}" * 80_001


@pytest.mark.parametrize(
    ("body", "statuses"),
    [
        pytest.param(ESCAPES_48K, {400}, id="48KB-escaped-quotes"),
        pytest.param(BRACKETS_UNDER_CAP, {400}, id="500K-brackets-under-the-cap"),
        pytest.param(DEEP_100K, {400}, id="100000-deep"),
        pytest.param(DEEP_OBJECTS, {400}, id="80000-deep-objects"),
        pytest.param(json.dumps({"a": "\u0122", "b": [[[[]]]]}).encode("utf-16"), {400}, id="utf-16"),
        pytest.param(
            b"[" * 300 + json.dumps({"x": "\u0122"}).encode("utf-32")[4:], {400}, id="utf-32-with-nesting"
        ),
        pytest.param(b"\xef\xbb\xbf" + VALID, {400}, id="utf-8-bom"),
    ],
)
def test_a_hostile_body_gets_a_4xx_and_does_not_stall_valid_reviews(
    served: Served, body: bytes, statuses: set[int]
) -> None:
    [(status, answer, elapsed)], probes = while_valid_reviews(
        served, [InFlight(served, "/validate-pods", body)]
    )
    assert status in statuses, (status, answer)
    assert answer is not None and "error" in answer and "\n" not in answer["error"], answer
    show(f"{len(body)} bytes", elapsed, probes)


def test_a_body_over_the_cap_is_refused_from_its_head(served: Served) -> None:
    """A Content-Length over the cap (1 MiB of brackets) is a 413 before a byte of the body is
    sent: the answer is read with the body still withheld."""
    conn = http.client.HTTPSConnection("127.0.0.1", served.port, context=served.context(), timeout=HOSTILE_S)
    try:
        conn.putrequest("POST", "/validate-pods", skip_accept_encoding=True)
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(BRACKETS_1M)))
        conn.endheaders()
        resp = conn.getresponse()
        status, answer = resp.status, json.loads(resp.read())
    finally:
        conn.close()
    assert status == 413, (status, answer)
    assert "\n" not in answer["error"] and "more than the" in answer["error"], answer


def test_sixteen_deep_bodies_at_once_do_not_stall_valid_reviews(served: Served) -> None:
    hostile = [InFlight(served, "/validate-pods", DEEP_100K) for _ in range(16)]
    answers, probes = while_valid_reviews(served, hostile)
    assert {a[0] for a in answers} <= {400, 429}, [a[:2] for a in answers]
    show("16 x 100000-deep", max(a[2] for a in answers), probes)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_claimed_content_encoding_is_a_415_on_every_path(served: Served, encoding: str) -> None:
    for target in TARGETS:
        status, answer, _ = served.post(f"/{target.handler_id}", VALID, {"Content-Encoding": encoding})
        assert status == 415, (target.handler_id, status, answer)
        assert answer is not None and "Content-Encoding" in answer["error"]
    # A real deflate body is refused just the same (the apiserver never compresses a review).
    status, _, _ = served.post("/validate-pods", zlib.compress(VALID), {"Content-Encoding": "deflate"})
    assert status == 415


def test_a_4301_digit_replica_key_is_judged_not_a_500(served: Served) -> None:
    job = yaml.safe_load((EX / "workloads" / "pytorchjob.yaml").read_text())
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["[" + "9" * 4301 + "]"] = specs.pop(next(iter(specs)))
    target = next(t for t in TARGETS if t.plural == "pytorchjobs")
    resource = {"group": target.group, "version": "v1", "resource": target.plural}
    status, answer, _ = served.post(
        f"/{target.handler_id}", json.dumps(review(job, resource=resource)).encode()
    )
    assert status == 200, (status, answer)
    assert answer["response"]["uid"] == "u-1" and isinstance(answer["response"]["allowed"], bool)


@pytest.mark.parametrize("path", ["/", "/metrics", "/validate-widgets", "/validate-pods/x", "/healthz"])
def test_an_unknown_path_is_a_404_never_an_allow(served: Served, path: str) -> None:
    status, answer, _ = served.post(path, BAD_33)
    assert status == 404, (status, answer)
    assert answer is not None and path in answer["error"]


def test_a_review_for_another_kind_is_denied_never_allowed(served: Served) -> None:
    """A 33 % pod posted to the Jobs handler: a 400 denial naming both, not an allow."""
    status, answer, _ = served.post("/validate-jobs", BAD_33)
    assert status == 200, (status, answer)
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "validate-jobs judges jobs.batch, not /v1/pods" in response["status"]["message"]


def test_get_is_a_405(served: Served) -> None:
    req = urllib.request.Request(f"https://127.0.0.1:{served.port}/validate-pods", method="GET")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, context=served.context(), timeout=10)
    with err.value:
        assert err.value.code == 405


def _closed(sock: ssl.SSLSocket) -> bool:
    """Whether the server has closed ``sock`` (an EOF, a reset, or an answer then EOF)."""
    try:
        sock.settimeout(0.5)
        data = sock.recv(65536)
    except (TimeoutError, ssl.SSLWantReadError):
        return False
    except OSError:
        return True
    return data == b"" or b"HTTP/1.1" in data


def test_slow_and_aborted_clients_are_cut_off_and_logged_in_one_line(served: Served) -> None:
    head = (
        f"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nContent-Type: application/json\r\n"
    ).encode()
    # Twenty clients that send their request head one byte a second.
    slow = [served.raw_connection() for _ in range(20)]
    # One that promises 20 MiB and sends 932 bytes; one that promises 9000 and sends 932.
    liar = served.raw_connection()
    liar.sendall(head + f"Content-Length: {20 * 1024 * 1024}\r\n\r\n".encode() + b"{" * 932)
    stalled = served.raw_connection()
    stalled.sendall(head + b"Content-Length: 9000\r\n\r\n" + b"{" * 932)
    # Thirty that send half a body and disconnect.
    for _ in range(30):
        aborted = served.raw_connection()
        aborted.sendall(head + f"Content-Length: {len(VALID)}\r\n\r\n".encode() + VALID[: len(VALID) // 2])
        aborted.close()
    status, _, elapsed = served.post("/validate-pods", VALID, timeout=VALID_S)
    assert status == 200, (status, elapsed)
    print(f"a valid review after 30 aborted clients: {elapsed * 1000:.1f} ms")
    assert _closed(liar), "a Content-Length over the cap must be refused at once"
    started = time.monotonic()
    open_ = list(slow)
    while open_ and time.monotonic() - started < 40:
        for sock in list(open_):
            try:
                sock.send(b"P")
            except OSError:
                open_.remove(sock)
        time.sleep(1)
        open_ = [s for s in open_ if not _closed(s)]
    print(f"slow clients cut off after {time.monotonic() - started:.1f} s")
    assert not open_, f"{len(open_)} of 20 slow clients still open after 40 s"
    assert _closed(stalled), "a body that never completes must be timed out"
    for sock in [*slow, liar, stalled]:
        sock.close()
    status, _, _ = served.post("/validate-pods", VALID, timeout=VALID_S)
    assert status == 200
    # Aborted and malformed requests log one line each, never a traceback (checked at teardown too).
    log = served.proc.log_path.read_text(errors="replace")
    assert "Traceback" not in log and '"exc_info"' not in log


def test_malformed_http_gets_a_400_without_a_traceback(served: Served) -> None:
    sock = served.raw_connection()
    sock.sendall(b"POST /validate-pods HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}")
    data = sock.recv(65536)
    sock.close()
    assert data.startswith((b"HTTP/1.1 400", b"HTTP/1.0 400")), data[:200]
    assert b"Content-Length" in data.split(b"\r\n\r\n", 1)[1], data  # the parser's reason, one line
    assert "Traceback" not in served.proc.log_path.read_text(errors="replace")
