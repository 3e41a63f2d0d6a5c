"""`kubectl explain gsp.<path>` on the real apiserver describes every field of the CRD.

The paths come from the generated schema (``gpushare.api.crd.field_paths``), so a field added to the
models without a description fails here as well as in tests/unit/test_crd.py. The apiserver
publishes the description through its OpenAPI v3 document; kubectl reads that, not our file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from gpushare.api.crd import field_paths
from gpushare.devcluster import ClusterInfo


def _explain(kubectl: str, kubeconfig: str, cache: str, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    return subprocess.run(
        [kubectl, "explain", f"gsp.{path}", "--cache-dir", cache],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _published(
    kubectl: str, kubeconfig: str, cache: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        proc = _explain(kubectl, kubeconfig, cache, "spec")
        if proc.returncode == 0 or time.monotonic() > deadline:
            return proc
        # a stale discovery cache would keep saying "couldn't find resource": start over
        shutil.rmtree(cache, ignore_errors=True)
        time.sleep(1)


def _words(text: str) -> list[str]:
    return re.sub(r"\s+", " ", text).strip().split(" ")


def test_kubectl_explain_describes_every_field(cluster: ClusterInfo) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed (the integration tests need it on PATH)"
    paths = field_paths()
    assert len(paths) > 40
    with tempfile.TemporaryDirectory() as cache:
        # The API server publishes a new CRD's OpenAPI a little after it is Established: wait for it
        # (this first call also fills kubectl's discovery/OpenAPI cache for the rest).
        first = _published(kubectl, str(cluster.kubeconfig), cache)
        assert first.returncode == 0, first.stderr
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(
                pool.map(lambda p: (p, _explain(kubectl, str(cluster.kubeconfig), cache, p[0])), paths)
            )
    failures: list[str] = []
    for (path, description), proc in results:
        if proc.returncode != 0:
            failures.append(f"gsp.{path}: kubectl exit {proc.returncode}: {proc.stderr.strip()}")
            continue
        if "DESCRIPTION:" not in proc.stdout:
            failures.append(f"gsp.{path}: no DESCRIPTION section:\n{proc.stdout}")
            continue
        shown = proc.stdout.split("DESCRIPTION:", 1)[1].split("FIELDS:", 1)[0]
        shown_words = _words(shown)
        if not shown.strip() or shown.strip() == "<empty>":
            failures.append(f"gsp.{path}: empty description")
        elif _words(description)[:6] != shown_words[:6]:
            failures.append(f"gsp.{path}: kubectl shows {' '.join(shown_words[:6])!r}, the model says "
                            f"{' '.join(_words(description)[:6])!r}")  # fmt: skip
    assert not failures, "\n".join(failures)


def test_kubectl_explain_standard_fields_come_from_the_apiserver(cluster: ClusterInfo) -> None:
    """apiVersion, kind and metadata are documented by the API server itself, not by our CRD."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed"
    with tempfile.TemporaryDirectory() as cache:
        assert _published(kubectl, str(cluster.kubeconfig), cache).returncode == 0
        for path in ("apiVersion", "kind", "metadata", "metadata.name"):
            proc = _explain(kubectl, str(cluster.kubeconfig), cache, path)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.split("DESCRIPTION:", 1)[1].strip(), path


def test_kubectl_explain_mode_switch_answers_the_error_messages(cluster: ClusterInfo) -> None:
    """Error messages send users to `kubectl explain gsp.spec.rollout.modeSwitch`: it must help."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed"
    with tempfile.TemporaryDirectory() as cache:
        assert _published(kubectl, str(cluster.kubeconfig), cache).returncode == 0
        proc = _explain(kubectl, str(cluster.kubeconfig), cache, "spec.rollout.modeSwitch")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(_words(proc.stdout))
    for word in ("Wait", "Cordon", "Evict", "Force", "ack.node.gpu.schedule", "Eviction API"):
        assert word in text, (word, proc.stdout)


def test_int_or_string_max_unavailable_is_published_as_such_and_says_so(cluster: ClusterInfo) -> None:
    """The apiserver publishes rollout.maxUnavailable with x-kubernetes-int-or-string (and anyOf
    integer/string). kubectl explain still prints ``<Object>`` beside it: its template shows a
    schema's ``type``, and an int-or-string schema has none (every CRD's int-or-string field reads
    so). The description therefore starts with the type."""
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed"
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    raw = subprocess.run(
        [kubectl, "get", "--raw", "/openapi/v3/apis/gpushare.io/v1alpha1"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    schemas = json.loads(raw.stdout)["components"]["schemas"]
    pool = schemas["io.gpushare.v1alpha1.GPUSharePool"]
    field = pool["properties"]["spec"]["properties"]["rollout"]["properties"]["maxUnavailable"]
    assert field["x-kubernetes-int-or-string"] is True, field
    assert sorted(o.get("type") for o in field.get("anyOf", [])) == ["integer", "string"], field
    with tempfile.TemporaryDirectory() as cache:
        assert _published(kubectl, str(cluster.kubeconfig), cache).returncode == 0
        proc = _explain(kubectl, str(cluster.kubeconfig), cache, "spec.rollout.maxUnavailable")
    assert proc.returncode == 0, proc.stderr
    shown = " ".join(_words(proc.stdout.split("DESCRIPTION:", 1)[1]))
    assert shown.startswith("Integer or percentage string (int-or-string, as a Deployment's)"), proc.stdout
