"""The real-node tier's pieces that need no root: images, configs, the DaemonSet variants, preflight."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from gpushare.devcluster import realnode
from gpushare.devcluster.fakes import PLUGIN_IMAGE, RealNodePlugin, device_plugin_daemonset_body
from gpushare.devcluster.images import build_image, pack_layer


def test_image_is_a_one_layer_docker_archive_with_the_binary_as_entrypoint(tmp_path: Path) -> None:
    binary = tmp_path / "workload"
    binary.write_bytes(b"\x7fELF not really")
    out = build_image("localhost/gpushare/workload:1.0", binary, tmp_path / "img.tar")
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == ["localhost/gpushare/workload:1.0"]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        assert config["config"]["Entrypoint"] == ["/workload"]
        assert (config["os"], config["architecture"]) == ("linux", "amd64")
        (layer_name,) = manifest[0]["Layers"]
        layer = tar.extractfile(layer_name)
        assert layer is not None
        with tarfile.open(fileobj=layer) as inner:
            members = {m.name: m for m in inner.getmembers()}
    assert members["workload"].mode == 0o755
    assert {"proc", "sys", "dev", "tmp", "etc"} <= set(members)
    assert "lib" not in members  # links only when asked for
    linked = build_image("x:1", binary, tmp_path / "linked.tar", links={"lib": "usr/lib"})
    with tarfile.open(linked) as tar:
        (name,) = json.loads(tar.extractfile("manifest.json").read())[0]["Layers"]  # type: ignore[union-attr]
        with tarfile.open(fileobj=tar.extractfile(name)) as inner:
            lib = inner.getmember("lib")
    assert (lib.issym(), lib.linkname) == (True, "usr/lib")
    # Deterministic: the same binary gives the same archive.
    again = build_image("localhost/gpushare/workload:1.0", binary, tmp_path / "again.tar")
    assert again.read_bytes() == out.read_bytes()


def test_a_packed_root_filesystem_is_the_layer_with_its_diff_id_and_config(tmp_path: Path) -> None:
    import hashlib
    import io

    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        info = tarfile.TarInfo("opt/gpushare/bin/gpushare")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"#!py"))
    out = pack_layer(
        "localhost/gpushare-operator:0.1.0", layer, tmp_path / "img.tar",
        entrypoint=["gpushare"], cmd=["run"], env=["PATH=/opt/gpushare/bin"], user="65532:65532",
        created_by="test",
    )  # fmt: skip
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == ["localhost/gpushare-operator:0.1.0"]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        packed = tar.extractfile(manifest[0]["Layers"][0]).read()  # type: ignore[union-attr]
    assert packed == layer.read_bytes()
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(packed).hexdigest()]
    assert config["config"]["User"] == "65532:65532"
    assert (config["config"]["Entrypoint"], config["config"]["Cmd"]) == (["gpushare"], ["run"])
    assert not (tmp_path / "img.tar.partial").exists()


def test_the_kwok_daemonset_is_unchanged_without_real_nodes() -> None:
    body = device_plugin_daemonset_body()
    pod = body["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod
    assert pod["containers"][0]["image"] == PLUGIN_IMAGE
    assert "args" not in pod["containers"][0]


def test_the_real_node_daemonset_reaches_the_apiserver_and_the_kubelet() -> None:
    body = device_plugin_daemonset_body(real_nodes=RealNodePlugin(api_port=6443, gpus=2, gpu_memory_mib=8192))
    pod = body["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["serviceAccountName"] == "gpushare-device-plugin"
    container = pod["containers"][0]
    assert container["args"] == ["--gpus=2", "--gpu-memory-mib=8192", "--memory-unit=GiB"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    res = container["resources"]
    assert res["requests"] == res["limits"]  # Guaranteed, as ACK's
    assert container["volumeMounts"][0]["mountPath"] == "/var/lib/kubelet/device-plugins"


def test_configs_keep_the_host_changes_small(tmp_path: Path) -> None:
    node = realnode.RealNode("realnode-0", "tok", "192.0.2.2", 10250, 10248, tmp_path / "n")
    cfg = realnode.kubelet_config(tmp_path, node, tmp_path / "ca.crt")
    assert cfg["makeIPTablesUtilChains"] is False
    assert cfg["failCgroupV1"] is False
    assert cfg["imageGCHighThresholdPercent"] == 100
    toml = realnode.containerd_config(tmp_path)
    assert "restrict_oom_score_adj = true" in toml
    assert f'root = "{tmp_path}/containerd/root"' in toml
    assert f'path = "{tmp_path}/containerd/opt"' in toml  # not /opt/containerd
    cni = realnode.cni_config(tmp_path)
    assert cni["plugins"][0]["bridge"] == realnode.BRIDGE
    assert cni["plugins"][0]["ipMasq"] is False


def test_preflight_says_in_one_line_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(realnode.RealNodeUnavailable, match="at most 1 real node") as many:
        realnode.preflight(2)
    assert "\n" not in str(many.value)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(realnode.RealNodeUnavailable, match="need root") as root:
        realnode.preflight(1)
    assert "REAL_NODES=0" in str(root.value)
    assert "\n" not in str(root.value)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setenv("GPUSHARE_KUBELET_BIN", "/nonexistent")
    monkeypatch.setattr(realnode, "_tool", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("os.access", lambda path, mode: "nonexistent" not in str(path))
    with pytest.raises(realnode.RealNodeUnavailable, match="make kubelet"):
        realnode.preflight(1)


def test_host_state_round_trips(tmp_path: Path) -> None:
    before = realnode.HostBefore(
        sysctls={"net.ipv4.ip_forward": "0"},
        dirs={"/var/lib/kubelet": False},
        chains=[["iptables", "nat", "X"]],
    )
    before.save(tmp_path / "b.json")
    assert realnode.HostBefore.load(tmp_path / "b.json") == before


def test_nvidia_daemonset_is_the_charts_shape_with_flags_that_need_no_device_nodes() -> None:
    from gpushare.devcluster import nvidia as nv

    pod = nv.daemonset_body()["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True  # the sidecar signals the plugin's process
    (init,) = pod["initContainers"]
    sidecar, plugin = pod["containers"]
    env = {c["name"]: {e["name"]: e.get("value") for e in c["env"]} for c in (init, sidecar, plugin)}
    assert plugin["command"] == ["nvidia-device-plugin"]  # argv[0], what PROCESS_TO_SIGNAL names
    assert env[sidecar["name"]]["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    assert (env[sidecar["name"]]["ONESHOT"], env[init["name"]]["ONESHOT"]) == ("false", "true")
    assert env[sidecar["name"]]["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert env[plugin["name"]]["CONFIG_FILE"] == env[sidecar["name"]]["CONFIG_FILE_DST"]
    assert "DP_DISABLE_HEALTHCHECKS" not in env[plugin["name"]]
    assert set(plugin["args"]) == {
        "--device-discovery-strategy=nvml",
        "--device-list-strategy=envvar",
        "--pass-device-specs=false",
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["available-configs"]["configMap"]["name"] == nv.CONFIGS_CONFIGMAP
    assert volumes["driver-root"]["hostPath"]["path"] == str(nv.driver_root())
    assert env[plugin["name"]][nv.FAKE_NVML_CONFIG_ENV].startswith("/etc/gpushare-fake-nvml/")


def test_gfd_daemonset_is_the_charts_shape_and_follows_the_plugins_config_label() -> None:
    from gpushare.devcluster import nvidia as nv

    pod = nv.gfd_daemonset_body(sleep_interval="7s")["spec"]["template"]["spec"]
    assert pod["shareProcessNamespace"] is True  # the sidecar signals GFD's process
    (init,) = pod["initContainers"]
    sidecar, gfd = pod["containers"]
    env = {c["name"]: {e["name"]: e.get("value") for e in c["env"]} for c in (init, sidecar, gfd)}
    assert gfd["command"] == ["gpu-feature-discovery"]  # argv[0], what PROCESS_TO_SIGNAL names
    assert env[sidecar["name"]]["PROCESS_TO_SIGNAL"] == "gpu-feature-discovery"
    assert env[sidecar["name"]]["NODE_LABEL"] == nv.CONFIG_LABEL  # the plugin's label and configs
    assert env[gfd["name"]]["CONFIG_FILE"] == env[sidecar["name"]]["CONFIG_FILE_DST"]
    assert env[gfd["name"]]["GFD_SLEEP_INTERVAL"] == "7s"
    # NodeFeature objects (GFD's default), for nfd-master: it needs its node and namespace.
    assert (
        "GFD_USE_NODE_FEATURE_API" not in env[gfd["name"]] and "USE_NODE_FEATURE_API" not in env[gfd["name"]]
    )
    assert {"NODE_NAME", "NAMESPACE"} <= set(env[gfd["name"]])
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["available-configs"]["configMap"]["name"] == nv.CONFIGS_CONFIGMAP
    assert env[gfd["name"]]["LD_LIBRARY_PATH"] == "/driver-root/usr/lib64"
    assert volumes["driver-root"]["hostPath"]["path"] == str(nv.driver_root())
    _, role, _ = nv.gfd_rbac_bodies()
    assert {
        "apiGroups": ["nfd.k8s-sigs.io"],
        "resources": ["nodefeatures"],
        "verbs": ["get", "list", "watch", "create", "update"],
    } in role["rules"]


def test_nfd_master_is_the_version_go_mod_pins_with_nfds_rbac(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpushare.devcluster import nfd

    assert nfd.nfd_version() == "v0.18.3"
    monkeypatch.delenv("GPUSHARE_NFD_BIN", raising=False)
    monkeypatch.setenv("GPUSHARE_CACHE", "/cache")
    assert nfd.bin_dir() == Path("/cache/bin/node-feature-discovery-v0.18.3")
    (master,) = nfd.master_deployment_body()["spec"]["template"]["spec"]["containers"]
    assert master["image"] == "localhost/gpushare/node-feature-discovery:v0.18.3"
    assert master["command"] == ["nfd-master"]
    _, role, binding = nfd.master_rbac_bodies()
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in role["rules"]}
    assert {"patch", "update"} <= rules[("",), ("nodes", "nodes/status")]  # it writes the labels
    assert "watch" in rules[(nfd.GROUP,), ("nodefeatures", "nodefeaturerules", "nodefeaturegroups")]
    assert binding["subjects"][0]["name"] == nfd.MASTER


def test_nvidia_time_slicing_configs() -> None:
    import yaml

    from gpushare.devcluster import nvidia as nv

    ts4 = yaml.safe_load(nv.time_slicing_config(4))
    assert ts4["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert "sharing" not in yaml.safe_load(nv.time_slicing_config(1))
    assert nv.fake_nvml_config(3, uuids={1: "GPU-x"}) == "count=3\ngpu.1.uuid=GPU-x\n"


def test_files_image_holds_each_file_under_its_parent_dirs(tmp_path: Path) -> None:
    from gpushare.devcluster.images import build_files_image

    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    out = build_files_image(
        "x:1",
        {"usr/bin/a": a, "lib64/b.so": b},
        tmp_path / "img.tar",
        entrypoint=["a"],
        env=["PATH=/usr/bin"],
    )
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())  # type: ignore[union-attr]
        with tarfile.open(fileobj=tar.extractfile(manifest[0]["Layers"][0])) as inner:
            members = {m.name: m for m in inner.getmembers()}
    assert config["config"]["Entrypoint"] == ["a"] and config["config"]["Env"] == ["PATH=/usr/bin"]
    assert members["usr"].isdir() and members["usr/bin"].isdir() and members["lib64"].isdir()
    assert members["usr/bin/a"].mode == 0o755 and members["lib64/b.so"].size == 1


def test_nvidia_plugin_option_needs_a_real_node_and_its_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpushare.devcluster.__main__ import main

    monkeypatch.setenv("GPUSHARE_NVIDIA_PLUGIN_BIN", str(tmp_path / "no-plugin"))
    assert main(["up", "--dir", str(tmp_path / "c"), "--nvidia-plugin"]) == 1
    err = capsys.readouterr().err
    assert "--nvidia-plugin: missing" in err and "(make nvidia-plugin)" in err, err
    assert not (tmp_path / "c").exists()  # nothing started


def test_nvidia_plugin_version_is_the_go_mod_pin_and_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpushare.devcluster import nvidia as nv

    assert nv.plugin_version() == "v0.19.3"
    monkeypatch.delenv("GPUSHARE_NVIDIA_PLUGIN_BIN", raising=False)
    monkeypatch.setenv("GPUSHARE_CACHE", "/cache")
    assert nv.plugin_bin_dir() == Path("/cache/bin/nvidia-device-plugin-v0.19.3")
    assert nv.image_ref() == "localhost/gpushare/nvidia-device-plugin:v0.19.3"
