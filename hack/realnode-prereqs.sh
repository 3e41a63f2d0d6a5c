#!/usr/bin/env bash
# Make the host packages of the real-node test tier available (`make realnode-prereqs`; `make test`
# runs it): containerd (with ctr), runc, the CNI plugins (bridge, host-local in /usr/lib/cni) and
# iptables. What is missing is installed from Debian with apt-get as root (or passwordless sudo),
# as hack/promtool.sh does for promtool. Anything else: one line saying what and how, and exit 1.
#
# Pinned by what works on a cgroup v1 host without CAP_SYS_RESOURCE: Debian bookworm's
# containerd 1.6 and runc 1.1 (docs/development.md).
set -euo pipefail

missing=()
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v ctr >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] || missing+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)

if [ ${#missing[@]} -eq 0 ]; then
  echo "realnode-prereqs: containerd, runc, CNI plugins, iptables present"
  exit 0
fi
# unique, in order
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')

fail() {
  echo "realnode-prereqs: missing ${pkgs[*]} — $*; install them (Debian: apt-get install ${pkgs[*]}) or run 'make test REAL_NODES=0' to leave the real-node tier out" >&2
  exit 1
}

source "$(dirname "$0")/apt.sh"
echo "realnode-prereqs: installing ${pkgs[*]} from Debian"
apt_install "${pkgs[@]}"
command -v containerd >/dev/null 2>&1 && [ -x /usr/lib/cni/bridge ] || fail "the packages did not provide containerd / the CNI plugins"
echo "realnode-prereqs: installed ${pkgs[*]}"
