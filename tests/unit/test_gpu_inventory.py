"""The agent's pure side: NVML stand-in → inventory → node labels/annotation → patch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpushare import constants as c
from gpushare.gpu.fake import FakeGPU, FakeMigDevice, FakeNVML
from gpushare.gpu.inventory import (
    AGENT_LABELS,
    Inventory,
    collect_inventory,
    desired_node_metadata,
    gpu_memory_mib,
    inventory_from_annotations,
    isolation_state,
    label_value,
    node_metadata_patch,
)
from gpushare.gpu.isolation import IsolationPaths, detect_cgpu_isolation
from gpushare.gpu.nvml import KIND_LIBRARY_NOT_FOUND, NVMLError

H200 = FakeGPU(name="NVIDIA H200", memory_mib=143771)
A10 = FakeGPU(name="NVIDIA A10", memory_mib=23028)


def test_homogeneous_gpus() -> None:
    nvml = FakeNVML(gpus=[H200, H200, H200, H200])
    inv = collect_inventory(nvml, isolation="active")
    assert inv.state == "ok"
    assert inv.error is None
    assert inv.driver_version == "550.54.15"
    assert inv.cuda_driver_version == "12.4"
    assert [g.index for g in inv.gpus] == [0, 1, 2, 3]
    assert len({g.uuid for g in inv.gpus}) == 4
    labels, annotations = desired_node_metadata(inv)
    assert labels == {
        c.LABEL_GPU_COUNT: "4",
        c.LABEL_GPU_PRODUCT: "NVIDIA-H200",
        c.LABEL_GPU_MEMORY_MIB: "143771",
        c.LABEL_CGPU_ISOLATION: "active",
    }
    published = json.loads(annotations[c.ANNOTATION_INVENTORY])
    assert published["gpus"][0] == {
        "index": 0,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "name": "NVIDIA H200",
        "memoryMiB": 143771,
        "migEnabled": False,
    }
    assert published["driverVersion"] == "550.54.15"
    assert published["cudaDriverVersion"] == "12.4"
    assert published["cgpuIsolation"] == "active"
    assert published["state"] == "ok"
    # shutdown always follows a successful init
    assert nvml.calls[0] == "init"
    assert nvml.calls[-1] == "shutdown"


def test_mixed_gpus_publish_smallest_memory_and_mixed_product() -> None:
    inv = collect_inventory(FakeNVML(gpus=[H200, A10]), isolation="absent")
    labels, _ = desired_node_metadata(inv)
    assert labels[c.LABEL_GPU_MEMORY_MIB] == "23028"
    assert labels[c.LABEL_GPU_PRODUCT] == "mixed"
    assert labels[c.LABEL_GPU_COUNT] == "2"
    assert gpu_memory_mib(desired_node_metadata(inv)[1]) == [143771, 23028]


def test_mig_enabled_and_mig_unsupported() -> None:
    nvml = FakeNVML(gpus=[FakeGPU(name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig=True), A10])
    inv = collect_inventory(nvml)
    assert [g.mig_enabled for g in inv.gpus] == [True, False]
    assert json.loads(inv.to_json())["gpus"][0]["migEnabled"] is True


A100 = "NVIDIA A100-SXM4-40GB"
#: enumerated out of GPU-instance order: the inventory sorts them
MIXED = (
    FakeMigDevice("3g.20gb", gpu_instance_id=2, memory_mib=19968),
    FakeMigDevice(
        "1g.5gb", gpu_instance_id=7, memory_mib=4864, uuid="MIG-7b0c1d2e-0000-4000-8000-000000000007"
    ),
    FakeMigDevice("2g.10gb", gpu_instance_id=3, memory_mib=9856),
    FakeMigDevice("1c.2g.10gb", gpu_instance_id=5, compute_instance_id=1, memory_mib=9856),
)


def test_mig_devices_are_published_under_their_gpu_and_only_there() -> None:
    nvml = FakeNVML(
        gpus=[
            FakeGPU(name=A100, memory_mib=40960, mig=True, mig_devices=MIXED),
            FakeGPU(name=A100, memory_mib=40960, mig=False, mig_devices=MIXED),  # mode off: none read
            A10,
        ]
    )
    inv = collect_inventory(nvml)
    assert inv.state == "ok", inv.error
    assert "device_mig_devices(0)" in nvml.calls
    assert "device_mig_devices(1)" not in nvml.calls and "device_mig_devices(2)" not in nvml.calls
    published = json.loads(desired_node_metadata(inv)[1][c.ANNOTATION_INVENTORY])
    assert published["gpus"][0]["migDevices"] == [
        {
            "profile": "3g.20gb",
            "uuid": "MIG-00000000-0000-0000-0002-000000000000",
            "gpuInstanceId": 2,
            "computeInstanceId": 0,
            "memoryMiB": 19968,
        },
        {
            "profile": "2g.10gb",
            "uuid": "MIG-00000000-0000-0000-0003-000000000000",
            "gpuInstanceId": 3,
            "computeInstanceId": 0,
            "memoryMiB": 9856,
        },
        {
            "profile": "1c.2g.10gb",
            "uuid": "MIG-00000000-0000-0000-0005-000000000001",
            "gpuInstanceId": 5,
            "computeInstanceId": 1,
            "memoryMiB": 9856,
        },
        {
            "profile": "1g.5gb",
            "uuid": "MIG-7b0c1d2e-0000-4000-8000-000000000007",
            "gpuInstanceId": 7,
            "computeInstanceId": 0,
            "memoryMiB": 4864,
        },
    ]
    # a GPU without MIG devices publishes what it published before the field existed
    assert "migDevices" not in published["gpus"][1] and "migDevices" not in published["gpus"][2]
    assert published["gpus"][0]["memoryMiB"] == 40960  # the GPU's own memory, not the slices'
    assert inventory_from_annotations(desired_node_metadata(inv)[1]) == inv


def test_an_annotation_written_before_mig_devices_still_reads() -> None:
    old = (
        '{"cgpuIsolation":"absent","cudaDriverVersion":"12.4","driverVersion":"550.54.15","error":null,'
        '"gpus":[{"index":0,"memoryMiB":40960,"migEnabled":true,"name":"NVIDIA A100-SXM4-40GB",'
        '"uuid":"GPU-0"}],"state":"ok"}'
    )
    inv = inventory_from_annotations({c.ANNOTATION_INVENTORY: old})
    assert inv is not None
    assert inv.gpus[0].mig_devices == ()
    assert inv.to_json() == old  # and is written back byte for byte: no patch after an upgrade


def test_same_mig_devices_same_json_no_patch_and_a_new_geometry_patches_the_annotation() -> None:
    def node(devices: tuple[FakeMigDevice, ...]) -> tuple[dict[str, str | None], dict[str, str]]:
        gpu = FakeGPU(name=A100, memory_mib=40960, mig=True, mig_devices=devices)
        return desired_node_metadata(collect_inventory(FakeNVML(gpus=[gpu, gpu]), isolation="absent"))

    labels, annotations = node(MIXED)
    current = {k: v for k, v in labels.items() if v is not None}
    again_labels, again = node(tuple(reversed(MIXED)))  # another enumeration order, same devices
    assert again == annotations
    assert node_metadata_patch(current, annotations, again_labels, again) is None
    new_labels, new = node(MIXED[:2])
    assert node_metadata_patch(current, annotations, new_labels, new) == {"metadata": {"annotations": new}}


def test_a_failing_mig_read_is_unknown_naming_the_gpu_and_call() -> None:
    gpu = FakeGPU(name=A100, memory_mib=40960, mig=True, mig_devices=MIXED)
    nvml = FakeNVML(
        gpus=[gpu, gpu],
        device_errors={
            (1, "device_mig_devices"): NVMLError("Unknown Error", call="nvmlDeviceGetGpuInstanceId")
        },
    )
    inv = collect_inventory(nvml)  # never raises
    assert inv.state == "unknown"
    assert inv.error == "GPU 1: nvmlDeviceGetGpuInstanceId: Unknown Error"
    assert [g.index for g in inv.gpus] == [0]
    assert len(inv.gpus[0].mig_devices) == 4
    assert nvml.calls[-1] == "shutdown"
    labels, _ = desired_node_metadata(inv)
    assert labels[c.LABEL_GPU_COUNT] is None


def test_fake_mig_devices_from_dict() -> None:
    nvml = FakeNVML.from_dict(
        {
            "gpus": [
                {
                    "name": A100,
                    "memoryMiB": 40960,
                    "mig": True,
                    "migDevices": [{"profile": "7g.40gb", "gpuInstanceId": 0, "memoryMiB": 40192}],
                }
            ]
        }
    )
    (device,) = collect_inventory(nvml).gpus[0].mig_devices
    assert (device.profile, device.gpu_instance_id, device.memory_mib) == ("7g.40gb", 0, 40192)


def test_library_missing_is_unknown_with_error() -> None:
    inv = collect_inventory(FakeNVML.missing_library(), isolation="absent")
    assert inv.state == "unknown"
    assert inv.error is not None
    assert "NVML init failed" in inv.error
    assert "Library Not Found" in inv.error
    labels, annotations = desired_node_metadata(inv)
    # capacity labels removed (None = delete), isolation still published
    assert labels == {
        c.LABEL_GPU_COUNT: None,
        c.LABEL_GPU_PRODUCT: None,
        c.LABEL_GPU_MEMORY_MIB: None,
        c.LABEL_CGPU_ISOLATION: "absent",
    }
    assert json.loads(annotations[c.ANNOTATION_INVENTORY])["state"] == "unknown"


def test_init_error_does_not_call_shutdown() -> None:
    nvml = FakeNVML(init_error=NVMLError("Driver Not Loaded", kind="driver-not-loaded", call="nvmlInit"))
    inv = collect_inventory(nvml)
    assert inv.error == "NVML init failed: nvmlInit: Driver Not Loaded"
    assert nvml.calls == ["init"]


def test_error_on_one_device_names_it_and_keeps_the_others() -> None:
    nvml = FakeNVML(
        gpus=[H200, H200],
        device_errors={
            (1, "device_memory_total"): NVMLError("Unknown Error", call="nvmlDeviceGetMemoryInfo")
        },
    )
    inv = collect_inventory(nvml)
    assert inv.state == "unknown"
    assert inv.error == "GPU 1: nvmlDeviceGetMemoryInfo: Unknown Error"
    assert [g.index for g in inv.gpus] == [0]
    assert nvml.calls[-1] == "shutdown"
    labels, _ = desired_node_metadata(inv)
    assert labels[c.LABEL_GPU_COUNT] is None


def test_no_gpu_is_unknown() -> None:
    inv = collect_inventory(FakeNVML(gpus=[]))
    assert inv.state == "unknown"
    assert inv.error == "NVML reports no GPU on this node"
    assert inv.driver_version == "550.54.15"


def test_fake_library_missing_kind() -> None:
    nvml = FakeNVML.missing_library()
    with pytest.raises(NVMLError) as info:
        nvml.init()
    assert info.value.kind == KIND_LIBRARY_NOT_FOUND


def test_annotation_has_no_timestamps_and_is_stable() -> None:
    a = collect_inventory(FakeNVML(gpus=[H200, A10]), isolation="active").to_json()
    b = collect_inventory(FakeNVML(gpus=[H200, A10]), isolation="active").to_json()
    assert a == b
    assert "time" not in a.lower()
    assert " " not in a.replace("NVIDIA ", "")  # compact separators


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA H200", "NVIDIA-H200"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
        ("  (weird) / name!  ", "weird-name"),
        ("---", ""),
        ("A" * 70, "A" * 63),
        ("x" * 62 + " y", "x" * 62),  # truncation must not leave a trailing "-"
    ],
)
def test_label_value(text: str, expected: str) -> None:
    value = label_value(text)
    assert value == expected
    assert len(value) <= 63


def test_patch_only_when_changed() -> None:
    inv = collect_inventory(FakeNVML(gpus=[H200]), isolation="absent")
    labels, annotations = desired_node_metadata(inv)
    first = node_metadata_patch({"kubernetes.io/hostname": "n1"}, None, labels, annotations)
    assert first == {"metadata": {"labels": labels, "annotations": annotations}}
    # the node now carries everything: no patch
    current_labels = {"kubernetes.io/hostname": "n1", **{k: v for k, v in labels.items() if v is not None}}
    assert node_metadata_patch(current_labels, dict(annotations), labels, annotations) is None
    # isolation changes → only that label (and the annotation, which embeds it)
    inv2 = inv.model_copy(update={"cgpu_isolation": "active"})
    labels2, annotations2 = desired_node_metadata(inv2)
    patch = node_metadata_patch(current_labels, dict(annotations), labels2, annotations2)
    assert patch == {
        "metadata": {"labels": {c.LABEL_CGPU_ISOLATION: "active"}, "annotations": annotations2},
    }


def test_patch_never_touches_foreign_keys() -> None:
    inv = collect_inventory(FakeNVML.missing_library())
    labels, annotations = desired_node_metadata(inv)
    current = {"cgpu": "true", c.LABEL_GPU_COUNT: "8", "other": "x"}
    patch = node_metadata_patch(current, {"foo": "bar"}, labels, annotations)
    assert patch is not None
    touched = set(patch["metadata"]["labels"]) | set(patch["metadata"]["annotations"])
    assert touched <= {*AGENT_LABELS, c.ANNOTATION_INVENTORY}
    assert patch["metadata"]["labels"][c.LABEL_GPU_COUNT] is None  # stale count removed


def test_isolation_state_reader() -> None:
    inv = collect_inventory(FakeNVML(gpus=[H200]), isolation="absent")
    desired, annotations = desired_node_metadata(inv)
    labels = {k: v for k, v in desired.items() if v is not None}
    assert isolation_state(labels, annotations) == "absent"
    assert isolation_state({}, annotations) == "absent"  # annotation fallback
    assert isolation_state({c.LABEL_CGPU_ISOLATION: "active"}, annotations) == "active"  # label wins
    assert isolation_state(None, None) == "unknown"
    assert (
        isolation_state({c.LABEL_CGPU_ISOLATION: "bogus"}, {c.ANNOTATION_INVENTORY: "{not json"}) == "unknown"
    )


def test_inventory_round_trip() -> None:
    inv = collect_inventory(FakeNVML(gpus=[H200, A10]), isolation="active")
    _, annotations = desired_node_metadata(inv)
    assert inventory_from_annotations(annotations) == inv
    assert inventory_from_annotations({c.ANNOTATION_INVENTORY: '{"state": "weird"}'}) is None
    assert gpu_memory_mib({}) is None
    unknown = desired_node_metadata(Inventory())[1]
    assert gpu_memory_mib(unknown) is None


class TestIsolationDetection:
    def _paths(self, tmp_path: Path, modules: str | None, procdir: bool = False) -> IsolationPaths:
        mods = tmp_path / "modules"
        if modules is not None:
            mods.write_text(modules)
        cgpu = tmp_path / "cgpu_km"
        if procdir:
            cgpu.mkdir()
        return IsolationPaths(proc_modules=mods, proc_cgpu=cgpu)

    def test_module_loaded(self, tmp_path: Path) -> None:
        text = "nvidia_uvm 1 0 - Live 0x0\ncgpu_km 4096 0 - Live 0x0 (POE)\nnvidia 5 1 nvidia_uvm, Live 0x0\n"
        result = detect_cgpu_isolation(self._paths(tmp_path, text))
        assert result.state == "active"
        assert "cgpu_km" in result.reason

    def test_procfs_dir(self, tmp_path: Path) -> None:
        assert (
            detect_cgpu_isolation(self._paths(tmp_path, "nvidia 5 0 - Live\n", procdir=True)).state
            == "active"
        )

    def test_absent(self, tmp_path: Path) -> None:
        # a module whose name merely contains "cgpu_km" does not count
        result = detect_cgpu_isolation(self._paths(tmp_path, "nvidia 5 0 - Live\nnot_cgpu_km 1 0 - Live\n"))
        assert result.state == "absent"

    def test_unreadable(self, tmp_path: Path) -> None:
        result = detect_cgpu_isolation(self._paths(tmp_path, None))
        assert result.state == "unknown"
        assert "cannot read" in result.reason
