#!/usr/bin/env bash
# Runs a command (NVIDIA's nvidia-mig-parted, typically) in a mount namespace of its own that
# lays out what NVIDIA's MIG tools read besides NVML, for the GPUs that the project's
# libnvidia-ml.so.1 pretends (realnode/fakenvml). The project's glue, not NVIDIA's:
#
#   /proc/modules              an `nvidia` line: mig-parted asks NVML (not sysfs) only when the
#                              nvidia module is loaded. /proc becomes a tmpfs of symlinks into the
#                              real procfs (bind-mounted aside), plus that file.
#   /sys/bus/pci/devices       a tmpfs with one NVIDIA 3D controller (10de:20b0, A100-SXM4-40GB) per
#                              pretended GPU, at the PCI bus ids the library reports
#                              (0000:10:00.0, 0000:11:00.0, ...): vendor, device, class, numa_node,
#                              resource. The host's own PCI devices are hidden in the namespace.
#
# Nothing leaves the namespace: unshare(1) makes its mounts private, and they go with the command.
# Needs root (mounts). The number of GPUs comes from GPUSHARE_FAKE_NVML_CONFIG (count=, default 2),
# as in the library. nvidia-caps minors (/proc/driver/nvidia-caps/mig-minors, which the device
# plugin reads for MIG devices) are not laid out.
#
#   hack/mig-ns.sh -- nvidia-mig-parted export
set -euo pipefail
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || { echo "usage: $0 [--] command [args...]" >&2; exit 2; }

if [ -z "${GPUSHARE_MIG_NS:-}" ]; then
  [ "$(id -u)" = 0 ] || { echo "[mig-ns] needs root (it mounts in a namespace of its own)" >&2; exit 1; }
  # The folder the namespace mounts its tmpfs on; empty out here, removed when the command ends.
  root=$(mktemp -d /tmp/gpushare-mig-ns.XXXXXX)
  trap 'rmdir "$root"' EXIT
  GPUSHARE_MIG_NS="$root" unshare --mount --propagation private -- "$0" -- "$@"
  exit
fi

count=2
if [ -n "${GPUSHARE_FAKE_NVML_CONFIG:-}" ]; then
  n=$(awk -F= '{gsub(/[ \t]/, "", $1); gsub(/[ \t]/, "", $2)} $1 == "count" {print $2}' "$GPUSHARE_FAKE_NVML_CONFIG" | tail -1)
  count=${n:-2}
fi

root=$GPUSHARE_MIG_NS
mount -t tmpfs gpushare-mig-ns "$root"
mkdir "$root/proc.real" "$root/proc" "$root/pci"
mount --rbind /proc "$root/proc.real"
for entry in /proc/*; do
  name=${entry#/proc/}
  [ "$name" = modules ] || ln -s "$root/proc.real/$name" "$root/proc/$name"
done
# Same fields as the kernel's: name, size, users, dependents, state, address, taint.
printf 'nvidia 56807424 0 - Live 0x0000000000000000 (POE)\n' >"$root/proc/modules"

for ((i = 0; i < count; i++)); do
  dev=$(printf '%s/pci/0000:%02x:00.0' "$root" $((0x10 + i)))
  mkdir "$dev"
  echo 0x10de >"$dev/vendor"
  echo 0x20b0 >"$dev/device"
  echo 0x030200 >"$dev/class"
  echo -1 >"$dev/numa_node"
  printf '0x0000000000000000 0x0000000000000000 0x0000000000000000\n' >"$dev/resource"
done

mount --bind "$root/proc" /proc
mount --bind "$root/pci" /sys/bus/pci/devices
exec "$@"
