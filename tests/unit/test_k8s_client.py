"""make_api_client: explicit Configuration, in-cluster first, never the library default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from gpushare.devcluster.pki import make_ca
from gpushare.k8s.client import KubeConfigError, load_configuration, make_api_client

CA_PEM = make_ca().cert_pem.decode()


def write_kubeconfig(path: Path, server: str, token: str) -> Path:
    ca = path.parent / "ca.crt"
    ca.write_text(CA_PEM)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_kubeconfig_sets_host_and_token_without_touching_default(tmp_path: Path) -> None:
    before = k8s_client.Configuration.get_default_copy().host
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", "s3cret")
    api = await make_api_client(str(kc))
    try:
        assert api.configuration.host == "https://127.0.0.1:6443"
        assert api.configuration.api_key["BearerToken"] == "Bearer s3cret"
        assert k8s_client.Configuration.get_default_copy().host == before
    finally:
        await api.close()


async def test_two_clients_are_independent(tmp_path: Path) -> None:
    a = write_kubeconfig(tmp_path / "a", "https://127.0.0.1:1111", "ta")
    (tmp_path / "b").mkdir()
    b = write_kubeconfig(tmp_path / "b" / "kc", "https://127.0.0.1:2222", "tb")
    ca = await load_configuration(str(a))
    cb = await load_configuration(str(b))
    assert (ca.host, cb.host) == ("https://127.0.0.1:1111", "https://127.0.0.1:2222")
    assert ca is not cb


async def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match=r"kubeconfig '.*nope' does not exist"):
        await load_configuration(str(tmp_path / "nope"))


async def test_kubeconfig_env_is_read_at_call_time(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:3333", "t")
    cfg = await load_configuration(environ={"KUBECONFIG": str(kc)}, sa_dir=tmp_path / "nosa")
    assert cfg.host == "https://127.0.0.1:3333"


async def test_in_cluster_wins_when_no_kubeconfig_given(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("podtoken")
    (sa / "ca.crt").write_text(CA_PEM)
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    cfg = await load_configuration(environ=env, sa_dir=sa)
    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.api_key["BearerToken"] == "Bearer podtoken"
    # An explicit kubeconfig still beats the pod's service account.
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:4444", "t")
    cfg2 = await load_configuration(str(kc), environ=env, sa_dir=sa)
    assert cfg2.host == "https://127.0.0.1:4444"
