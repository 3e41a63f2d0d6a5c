"""``gpushare quota``: this container's GPU memory share, from the gpushare device plugin's env.

For pools without cGPU memory isolation, where each process must limit itself. Examples::

    gpushare quota                      # human-readable
    gpushare quota -o json
    eval "$(gpushare quota -o env)"     # GPUSHARE_MEM_FRACTION=... for shell entry points
    gpushare quota --nvml               # cross-check with the real GPU memory (NVML)

Exit code 2 with one line on stderr when the variables are missing or inconsistent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from typing import Any

from gpushare.cli import CLIError
from gpushare.gpu.nvml import NVML, NVMLError, PynvmlBackend
from gpushare.quota import (
    ENV_MARGIN,
    ENV_UNIT,
    MiB,
    Quota,
    QuotaError,
    floor6,
    parse_margin,
    read_quota,
)


def nvml_device_bytes(nvml: NVML, index: int) -> int:
    try:
        nvml.init()
    except NVMLError as exc:
        raise CLIError(f"--nvml: {exc}") from None
    try:
        count = nvml.device_count()
        if not 0 <= index < count:
            raise CLIError(f"--nvml-index {index}: NVML sees {count} GPU(s) in this container")
        return nvml.device_memory_total(index)
    except NVMLError as exc:
        raise CLIError(f"--nvml: {exc}") from None
    finally:
        with contextlib.suppress(NVMLError):
            nvml.shutdown()


def render_text(q: Quota, margin: float) -> str:
    u = q.unit
    lines = [
        f"container share   {q.container} {u} ({q.container_bytes} bytes)",
        f"GPU (plugin)      {q.device} {u} ({q.device_bytes} bytes, floored to whole {u})",
    ]
    if q.nvml_device_bytes is not None:
        lines.append(f"GPU (NVML)        {q.nvml_device_bytes // MiB} MiB ({q.nvml_device_bytes} bytes)")
    if q.pod is not None:
        lines.append(f"pod total         {q.pod} {u}")
    if q.index is not None:
        lines.append(f"host GPU index    {q.index} (CUDA device 0 inside the container)")
    lines += [
        "memory isolation  "
        + (
            "disabled (CGPU_DISABLE=true): limit the process yourself"
            if q.cgpu_disabled
            else "not known from env"
        ),
        f"fraction          {floor6(q.fraction):.6f} (container / plugin GPU)",
    ]
    if q.nvml_device_bytes is not None:
        lines.append(f"fraction of real  {floor6(q.effective_fraction):.6f} (container / NVML GPU)")
    lines += [
        f"with margin {margin:.0%}    {q.fraction_with_margin(margin):.6f}"
        f"  -> torch.cuda.set_per_process_memory_fraction(..., 0)",
        f"TensorFlow        memory_limit={q.memory_limit_mib(margin)} (MiB, LogicalDeviceConfiguration)",
    ]
    lines += [f"warning: {w}" for w in q.warnings]
    return "\n".join(lines)


def render_env(q: Quota, margin: float) -> str:
    values: dict[str, Any] = {
        "GPUSHARE_MEM_CONTAINER_BYTES": q.container_bytes,
        "GPUSHARE_MEM_DEVICE_BYTES": q.real_device_bytes,
        "GPUSHARE_MEM_FRACTION": f"{floor6(q.effective_fraction):.6f}",
        "GPUSHARE_MEM_FRACTION_SAFE": f"{q.fraction_with_margin(margin):.6f}",
        "GPUSHARE_MEM_LIMIT_MIB": q.memory_limit_mib(margin),
        "GPUSHARE_MEM_ISOLATED": q.isolated,
    }
    return "\n".join(f"export {k}={v}" for k, v in values.items())


def cmd_quota(
    args: argparse.Namespace, environ: dict[str, str] | None = None, nvml: NVML | None = None
) -> int:
    env = dict(os.environ) if environ is None else environ
    try:
        margin = parse_margin(args.margin if args.margin is not None else env.get(ENV_MARGIN))
        quota = read_quota(env, unit=args.unit)
        if args.nvml:
            quota = quota.with_nvml(nvml_device_bytes(nvml or PynvmlBackend(), args.nvml_index))
    except QuotaError as exc:
        raise CLIError(str(exc)) from None
    if args.output == "json":
        print(json.dumps(quota.as_dict(margin), indent=2))
    elif args.output == "env":
        print(render_env(quota, margin))
    else:
        print(render_text(quota, margin))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "quota",
        help="print this container's GPU memory share (ALIYUN_COM_GPU_MEM_*) as bytes and fractions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--output", choices=("text", "json", "env"), default="text")
    p.add_argument(
        "--unit", help=f"GiB or MiB: the device plugin's --memory-unit (default: env {ENV_UNIT}, else GiB)"
    )
    p.add_argument(
        "--margin", help=f"safety margin in [0, 1) kept free (default: env {ENV_MARGIN}, else 0.05)"
    )
    p.add_argument("--nvml", action="store_true", help="cross-check with the GPU's real memory through NVML")
    p.add_argument("--nvml-index", type=int, default=0, help="NVML index of the GPU (default 0)")
    p.set_defaults(func=cmd_quota)
