"""manifests/crd/ carries the generated CRD (kustomize cannot reach ../crds)."""

from __future__ import annotations

from pathlib import Path

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
