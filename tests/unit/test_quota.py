"""gpushare.quota and `gpushare quota`: every variable combination and bad value."""

from __future__ import annotations

import argparse
import json
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpushare.cli import CLIError, main
from gpushare.cli.quota import cmd_quota
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.quota import (
    DEFAULT_MARGIN,
    MiB,
    Quota,
    QuotaError,
    apply_tensorflow,
    apply_torch,
    parse_margin,
    parse_unit,
    read_quota,
    tensorflow_settings,
)

GiB = 1024**3
BASE = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "16"}


@pytest.mark.parametrize(
    ("env", "unit", "expected"),
    [
        pytest.param(
            BASE,
            None,
            {"container": 4, "device": 16, "pod": None, "index": None, "cgpu": False},
            id="minimal",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_POD": "8", "ALIYUN_COM_GPU_MEM_IDX": "2", "CGPU_DISABLE": "true"},
            None,
            {"container": 4, "device": 16, "pod": 8, "index": 2, "cgpu": True},
            id="all-variables",
        ),
        pytest.param({**BASE, "CGPU_DISABLE": "false"}, None, {"cgpu": False}, id="cgpu-disable-false"),
        pytest.param({**BASE, "CGPU_DISABLE": "TRUE"}, None, {"cgpu": True}, id="cgpu-disable-case"),
        pytest.param({**BASE, "ALIYUN_COM_GPU_MEM_IDX": "0"}, None, {"index": 0}, id="idx-zero"),
        pytest.param({**BASE, "ALIYUN_COM_GPU_MEM_POD": "4"}, None, {"pod": 4}, id="pod-equals-container"),
        pytest.param(
            {"ALIYUN_COM_GPU_MEM_CONTAINER": " 4 ", "ALIYUN_COM_GPU_MEM_DEV": "16\n"},
            None,
            {"container": 4},
            id="spaces",
        ),
        pytest.param(
            {**BASE, "NVIDIA_VISIBLE_DEVICES": "1"}, None, {"device": 16}, id="visible-devices-index"
        ),
        pytest.param(
            {"ALIYUN_COM_GPU_MEM_CONTAINER": "4096", "ALIYUN_COM_GPU_MEM_DEV": "16160"},
            "MiB",
            {"container": 4096, "device": 16160, "unit": "MiB"},
            id="mib-unit-arg",
        ),
        pytest.param(
            {
                "ALIYUN_COM_GPU_MEM_CONTAINER": "4096",
                "ALIYUN_COM_GPU_MEM_DEV": "16160",
                "GPUSHARE_MEMORY_UNIT": "mib",
            },
            None,
            {"unit": "MiB"},
            id="mib-unit-env",
        ),
        pytest.param(
            {**BASE, "GPUSHARE_MEMORY_UNIT": "MiB"}, "GiB", {"unit": "GiB"}, id="unit-arg-beats-env"
        ),
        pytest.param({**BASE, "ALIYUN_COM_GPU_MEM_CONTAINER": "16"}, None, {"container": 16}, id="whole-gpu"),
    ],
)
def test_valid_env(env: dict[str, str], unit: str | None, expected: dict[str, Any]) -> None:
    q = read_quota(env, unit=unit)
    got: dict[str, Any] = {
        "container": q.container,
        "device": q.device,
        "pod": q.pod,
        "index": q.index,
        "cgpu": q.cgpu_disabled,
        "unit": q.unit,
    }
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("env", "unit", "message"),
    [
        pytest.param({}, None, "ALIYUN_COM_GPU_MEM_CONTAINER is not set", id="nothing"),
        pytest.param(
            {"ALIYUN_COM_GPU_MEM_DEV": "16"},
            None,
            "ALIYUN_COM_GPU_MEM_CONTAINER is not set",
            id="no-container",
        ),
        pytest.param(
            {"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}, None, "ALIYUN_COM_GPU_MEM_DEV is not set", id="no-dev"
        ),
        pytest.param({**BASE, "ALIYUN_COM_GPU_MEM_CONTAINER": ""}, None, "CONTAINER is not set", id="empty"),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_CONTAINER": "4.5"},
            None,
            "CONTAINER='4.5' is not a whole",
            id="float",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_DEV": "16GiB"}, None, "DEV='16GiB' is not a whole", id="suffix"
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_CONTAINER": "0"},
            None,
            "CONTAINER=0 must be a positive number",
            id="zero",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_DEV": "-16"},
            None,
            "DEV=-16 must be a positive number",
            id="negative-dev",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_CONTAINER": "17"},
            None,
            "is larger than ALIYUN_COM_GPU_MEM_DEV=16",
            id="too-big",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_IDX": "-1"}, None, "could not allocate a GPU", id="idx-minus-one"
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_IDX": "-3"}, None, "IDX=-3 is not a GPU index", id="idx-negative"
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_IDX": "0,1"}, None, "IDX='0,1' is not a whole", id="idx-list"
        ),
        pytest.param(
            {**BASE, "NVIDIA_VISIBLE_DEVICES": "no-gpu-has-4GiB-to-run"},
            None,
            "could not allocate GPU memory",
            id="visible-sentinel",
        ),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_POD": "2"}, None, "POD=2 is smaller than", id="pod-smaller"
        ),
        pytest.param({**BASE, "ALIYUN_COM_GPU_MEM_POD": "x"}, None, "POD='x' is not a whole", id="pod-bad"),
        pytest.param(
            {**BASE, "ALIYUN_COM_GPU_MEM_POD": "8Gi"}, None, "POD='8Gi' is not a whole", id="pod-unit"
        ),
        pytest.param(
            {**BASE, "CGPU_DISABLE": "yes"}, None, "CGPU_DISABLE='yes' must be true or false", id="cgpu-bad"
        ),
        pytest.param(BASE, "GB", "memory unit must be GiB or MiB", id="unit-bad"),
        pytest.param({**BASE, "GPUSHARE_MEMORY_UNIT": "KiB"}, None, "got 'KiB'", id="unit-env-bad"),
    ],
)
def test_invalid_env(env: dict[str, str], unit: str | None, message: str) -> None:
    with pytest.raises(QuotaError) as info:
        read_quota(env, unit=unit)
    assert message in str(info.value)


def test_numbers() -> None:
    q = read_quota({"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"})
    assert q.container_bytes == 4 * GiB
    assert q.device_bytes == 15 * GiB
    assert q.fraction == pytest.approx(4 / 15)
    assert q.fraction_with_margin(0.0) == 0.266666  # floored, never rounded up
    assert q.fraction_with_margin(0.3) == pytest.approx(4 / 15 * 0.7, abs=1e-6)
    assert q.memory_limit_mib(0.05) == 3891  # floor(4096 * 0.95)
    assert tensorflow_settings(q, 0.05).memory_limit_mib == 3891


def test_nvml_cross_check_reports_both_and_warns_on_mismatch() -> None:
    q = read_quota({"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"})
    real = 16160 * MiB  # a 16 GB V100: the plugin floors it to 15 GiB
    checked = q.with_nvml(real)
    assert checked.device_bytes == 15 * GiB
    assert checked.real_device_bytes == real
    assert checked.effective_fraction == pytest.approx(4 * GiB / real)
    assert checked.effective_fraction < q.fraction
    assert checked.warnings == ()
    # mixed node: the plugin says 80 GiB for every GPU, this one has 24 GB
    big = read_quota({"ALIYUN_COM_GPU_MEM_CONTAINER": "30", "ALIYUN_COM_GPU_MEM_DEV": "79"}).with_nvml(
        23028 * MiB
    )
    assert any("mis-reported" in w for w in big.warnings)
    assert any("cannot be honoured" in w for w in big.warnings)
    assert big.effective_fraction == 1.0


@pytest.mark.parametrize("bad", [-0.1, 1.0, 2, float("nan")])
def test_bad_margin(bad: float) -> None:
    q = read_quota(BASE)
    with pytest.raises(QuotaError, match="margin"):
        q.fraction_with_margin(bad)


def test_parse_helpers() -> None:
    assert parse_unit(None) == "GiB"
    assert parse_unit("gib") == "GiB"
    assert parse_margin(None) == DEFAULT_MARGIN
    assert parse_margin("0.3") == 0.3
    with pytest.raises(QuotaError, match="not a number"):
        parse_margin("lots")


@given(
    device=st.integers(min_value=1, max_value=200_000),
    data=st.data(),
    unit=st.sampled_from(["GiB", "MiB"]),
    margin=st.floats(min_value=0.0, max_value=0.99),
)
@settings(deadline=None)  # no timing assertion: the shared CI machine is slow at times
def test_property_fraction_and_bytes(device: int, data: st.DataObject, unit: str, margin: float) -> None:
    container = data.draw(st.integers(min_value=1, max_value=device))
    q = read_quota(
        {"ALIYUN_COM_GPU_MEM_CONTAINER": str(container), "ALIYUN_COM_GPU_MEM_DEV": str(device)}, unit
    )
    per = GiB if unit == "GiB" else MiB
    assert q.container_bytes == container * per
    assert q.device_bytes == device * per
    assert 0.0 < q.fraction <= 1.0
    assert q.fraction * q.device_bytes == pytest.approx(q.container_bytes)
    safe = q.fraction_with_margin(margin)
    assert 0.0 <= safe <= q.fraction
    assert safe * q.device_bytes <= q.container_bytes
    assert q.memory_limit_mib(margin) * MiB <= q.container_bytes


@pytest.mark.parametrize("unit", ["GiB", "MiB"])
def test_a_fraction_not_exact_in_binary_never_exceeds_the_share(unit: str) -> None:
    # 3203 / 6250 = 0.51248, which times 6250 GiB came out a byte above 3203 GiB (found by hypothesis).
    q = read_quota({"ALIYUN_COM_GPU_MEM_CONTAINER": "3203", "ALIYUN_COM_GPU_MEM_DEV": "6250"}, unit)
    safe = q.fraction_with_margin(0.0)
    assert safe * q.device_bytes <= q.container_bytes
    assert safe == pytest.approx(0.51248, abs=2e-6)


# --- frameworks: stand-in modules (neither is installed on the test machines) -------------


class _FakeTorch(ModuleType):
    def __init__(self, total: int, available: bool = True) -> None:
        super().__init__("torch")
        self.applied: list[tuple[float, int]] = []
        applied = self.applied
        self.cuda = SimpleNamespace(
            is_available=lambda: available,
            get_device_properties=lambda d: SimpleNamespace(total_memory=total),
            set_per_process_memory_fraction=lambda f, d: applied.append((f, d)),
        )


def test_apply_torch_uses_real_device_total(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _FakeTorch(total=16160 * MiB)
    monkeypatch.setitem(sys.modules, "torch", torch)
    q = read_quota({"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"})
    fraction = apply_torch(q, margin=0.05)
    assert fraction is not None
    assert torch.applied == [(fraction, 0)]
    assert fraction * 16160 * MiB <= 0.95 * 4 * GiB
    assert fraction == pytest.approx(0.95 * 4 * GiB / (16160 * MiB), abs=1e-6)


def test_apply_torch_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", _FakeTorch(total=1, available=False))
    with pytest.raises(QuotaError, match="sees no CUDA device"):
        apply_torch(read_quota(BASE))


def test_frameworks_absent_return_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    q = read_quota(BASE)
    assert apply_torch(q) is None
    assert apply_tensorflow(q) is None


def test_apply_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, list[Any]]] = []
    tf = ModuleType("tensorflow")
    tf.config = SimpleNamespace(  # type: ignore[attr-defined]
        list_physical_devices=lambda kind: ["/physical_device:GPU:0"] if kind == "GPU" else [],
        set_logical_device_configuration=lambda dev, cfgs: calls.append((dev, cfgs)),
        LogicalDeviceConfiguration=lambda memory_limit: {"memory_limit": memory_limit},
    )
    monkeypatch.setitem(sys.modules, "tensorflow", tf)
    limit = apply_tensorflow(read_quota(BASE), margin=0.1)
    assert limit == int(4096 * 0.9)
    assert calls == [("/physical_device:GPU:0", [{"memory_limit": limit}])]
    with pytest.raises(QuotaError, match="TensorFlow sees 1 GPU"):
        apply_tensorflow(read_quota(BASE), device=1)


# --- CLI ----------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    from gpushare.cli import build_parser

    return build_parser().parse_args(["quota", *argv])


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    env = {**BASE, "ALIYUN_COM_GPU_MEM_IDX": "1", "CGPU_DISABLE": "true"}
    assert cmd_quota(_args("-o", "json", "--margin", "0.1"), environ=env) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["containerBytes"] == 4 * GiB
    assert out["deviceBytes"] == 16 * GiB
    assert out["fraction"] == 0.25
    assert out["fractionWithMargin"] == 0.225
    assert out["memoryLimitMiB"] == 3686
    assert out["isolated"] == "false"
    assert out["index"] == 1


def test_cli_env_is_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_quota(_args("-o", "env"), environ=dict(BASE)) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    parsed = dict(line.removeprefix("export ").split("=", 1) for line in lines)
    assert all(line.startswith("export GPUSHARE_MEM_") for line in lines)
    assert parsed["GPUSHARE_MEM_FRACTION"] == "0.250000"
    assert parsed["GPUSHARE_MEM_FRACTION_SAFE"] == "0.237500"
    assert parsed["GPUSHARE_MEM_CONTAINER_BYTES"] == str(4 * GiB)


def test_cli_text_with_fake_nvml(capsys: pytest.CaptureFixture[str]) -> None:
    nvml = FakeNVML(gpus=[FakeGPU(name="Tesla V100-SXM2-16GB", memory_mib=16160)])
    env = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"}
    assert cmd_quota(_args("--nvml"), environ=env, nvml=nvml) == 0
    out = capsys.readouterr().out
    assert "GPU (NVML)        16160 MiB" in out
    assert "fraction of real  0.253465" in out
    assert nvml.calls[-1] == "shutdown"


def test_cli_nvml_errors_are_cli_errors() -> None:
    with pytest.raises(CLIError, match="--nvml: NVML Shared Library Not Found"):
        cmd_quota(_args("--nvml"), environ=dict(BASE), nvml=FakeNVML.missing_library())
    with pytest.raises(CLIError, match="NVML sees 1 GPU"):
        cmd_quota(_args("--nvml", "--nvml-index", "3"), environ=dict(BASE), nvml=FakeNVML(gpus=[FakeGPU()]))


def test_cli_error_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV", "GPUSHARE_MEMORY_UNIT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("ALIYUN_COM_GPU_MEM_CONTAINER", "abc")
    monkeypatch.setenv("ALIYUN_COM_GPU_MEM_DEV", "16")
    assert main(["quota"]) == 2
    err = capsys.readouterr().err
    assert err == "gpushare quota: error: ALIYUN_COM_GPU_MEM_CONTAINER='abc' is not a whole number\n"


def test_quota_is_frozen() -> None:
    q = Quota(unit="GiB", container=1, device=2)
    with pytest.raises(AttributeError):
        q.container = 3  # type: ignore[misc]


def test_unit_follows_the_pool_or_the_device_size() -> None:
    """A MiB pool's plugin reports ALIYUN_COM_GPU_MEM_DEV=15360: without a unit that is MiB, not 15 TiB."""
    env = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4096", "ALIYUN_COM_GPU_MEM_DEV": "15360"}
    assert read_quota(env).unit == "MiB"
    assert read_quota({**env, "GPUSHARE_MEMORY_UNIT": "MiB"}).container_bytes == 4096 * 1024**2
    small = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"}
    assert read_quota(small).unit == "GiB"
    with pytest.raises(QuotaError, match="larger than"):
        read_quota({**env, "ALIYUN_COM_GPU_MEM_CONTAINER": "20000"})
