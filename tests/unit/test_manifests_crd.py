"""manifests/crd/ carries the generated CRD (kustomize cannot reach ../crds)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpushare.api.crd import render_crd_yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_manifest_crd_matches_models() -> None:
    text = (MANIFESTS / "crd" / "gpushare.io_gpusharepools.yaml").read_text()
    assert text == render_crd_yaml(), "manifests/crd/ drifted from the models: run `make manifests`"


def test_kustomizations_list_existing_files_only() -> None:
    for kfile in MANIFESTS.rglob("kustomization.yaml"):
        doc = yaml.safe_load(kfile.read_text())
        for res in doc.get("resources", []):
            assert (kfile.parent / res).exists(), f"{kfile}: resource {res} does not exist"


@pytest.mark.parametrize(
    "path", ["manifests", "manifests/overlays/cert-manager", "manifests/overlays/monitoring"]
)
def test_install_kustomizations_leave_the_crds_out(path: str) -> None:
    """`kubectl delete -k manifests/` (the documented uninstall) must never delete a CRD: deleting
    gpusharepools.gpushare.io deletes every pool with it. The CRDs are manifests/crd alone."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required for the manifest tests (it ships kustomize)")
    out = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS.parent / path)], check=True, capture_output=True, text=True
    ).stdout
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert kinds, path
    assert "CustomResourceDefinition" not in kinds, f"{path} renders a CRD: keep the CRDs in manifests/crd"
    crds = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / "crd")], check=True, capture_output=True, text=True
    ).stdout
    assert [d["kind"] for d in yaml.safe_load_all(crds) if d] == ["CustomResourceDefinition"] * 2
