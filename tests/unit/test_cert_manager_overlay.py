"""The cert-manager overlay builds, and wires cert-manager's Secret into the operator's webhook server."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _build(path: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required for the manifest tests (it ships kustomize)")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / path)], check=True, capture_output=True, text=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def test_overlay_adds_certificates_to_everything_in_the_base() -> None:
    base = {_key(o) for o in _build("manifests")}
    overlay = {_key(o): o for o in _build("manifests/overlays/cert-manager")}
    assert base <= set(overlay), f"overlay lost {base - set(overlay)}"
    added = {k for k in overlay if k not in base}
    assert {k[0] for k in added} == {"Certificate", "Issuer"}


def test_serving_certificate_matches_the_webhook_service_and_the_mounted_secret() -> None:
    objs = {_key(o): o for o in _build("manifests/overlays/cert-manager")}
    service = objs[("Service", "gpushare-system", "gpushare-webhook")]
    cert = objs[("Certificate", "gpushare-system", "gpushare-webhook")]
    expected = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert expected in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"]["name"] in {k[2] for k in objs if k[0] == "Issuer"}

    pod = objs[("Deployment", "gpushare-system", "gpushare-operator")]["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "webhook")  # gpushare webhook
    assert "--webhook-cert-files=/certs" in container["args"]
    (operator,) = [c for c in pod["containers"] if c["name"] == "operator"]
    assert not any(a.startswith("--webhook") for a in operator["args"])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/certs")
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    assert mount.get("readOnly") is True
