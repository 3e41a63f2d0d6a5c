"""gpushare.devcluster pieces that need no running cluster."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from gpushare.devcluster import binaries, pki
from gpushare.devcluster.fakes import device_plugin_daemonset_body, gpu_node_body

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-control-plane.sh"


def test_versions_match_the_build_script() -> None:
    text = SCRIPT.read_text()
    for var, value in (
        ("K8S_VERSION", binaries.K8S_VERSION),
        ("ETCD_VERSION", binaries.ETCD_VERSION),
        ("KWOK_VERSION", binaries.KWOK_VERSION),
    ):
        m = re.search(rf'^{var}="\$\{{{var}:-([^}}]+)\}}"', text, re.M)
        assert m, f"{var} default not found in {SCRIPT}"
        assert m.group(1) == value, f"{var}: script has {m.group(1)}, binaries.py has {value}"


def test_bin_dir_follows_env_like_the_script(tmp_path: Path) -> None:
    assert binaries.default_bin_dir({"GPUSHARE_BIN": "/x/y"}) == Path("/x/y")
    d = binaries.default_bin_dir({"GPUSHARE_CACHE": str(tmp_path)})
    assert d == tmp_path / "bin" / "k8s-v1.34.4-etcd-v3.6.16-kwok-v0.7.0"


def test_missing_binaries_name_the_make_target(tmp_path: Path) -> None:
    (tmp_path / "etcd").write_text("#!/bin/sh\n")
    (tmp_path / "etcd").chmod(0o755)
    with pytest.raises(binaries.BinariesMissing, match=r"kube-apiserver.*make control-plane"):
        binaries.find_binaries(tmp_path)


def test_serving_cert_has_loopback_ip_san_and_verifies_against_ca(tmp_path: Path) -> None:
    ca = pki.make_ca()
    srv = pki.make_serving_cert(ca)
    cert = x509.load_pem_x509_certificate(srv.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    srv.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # key matches cert
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0


def test_gpu_node_body_resources() -> None:
    body = gpu_node_body(
        "n1",
        labels={"alibabacloud.com/nodepool-id": "np-a"},
        gpus_per_node=2,
        gpu_mem_gib_per_gpu=24,
        core_percentage=True,
    )
    cap = body["status"]["capacity"]
    assert cap["aliyun.com/gpu-mem"] == "48"
    assert cap["aliyun.com/gpu-count"] == "2"
    assert cap["aliyun.com/gpu-core.percentage"] == "200"
    assert body["status"]["allocatable"] == cap
    assert body["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert body["metadata"]["labels"]["alibabacloud.com/nodepool-id"] == "np-a"
    assert "taints" not in body["spec"]
    plain = gpu_node_body("n2", labels={}, gpus_per_node=1, gpu_mem_gib_per_gpu=16, core_percentage=False)
    assert "aliyun.com/gpu-core.percentage" not in plain["status"]["capacity"]


def test_device_plugin_daemonset_matches_ack_names() -> None:
    ds = device_plugin_daemonset_body()
    assert ds["metadata"]["name"] == "gpushare-device-plugin-ds"
    assert ds["metadata"]["namespace"] == "kube-system"
    tmpl = ds["spec"]["template"]
    assert tmpl["metadata"]["labels"]["name"] == "gpushare-device-plugin-ds"
    assert tmpl["spec"]["nodeSelector"] == {"gpushare": "true"}
    assert tmpl["spec"]["tolerations"] == [{"operator": "Exists"}]
