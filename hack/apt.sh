# Sourced by the scripts that install a Debian package when a tool is missing (promtool.sh,
# chromium.sh, realnode-prereqs.sh); the caller defines fail(). `apt_install PKG...` installs the
# packages with apt-get as root or with passwordless sudo, running `apt-get update` once when the
# first try fails; anything else calls fail with the reason.
apt_install() {
  command -v apt-get >/dev/null 2>&1 || fail "no apt-get on this machine"
  local sudo=()
  if [[ "$(id -u)" -eq 0 ]]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    fail "not root and no passwordless sudo to run apt-get"
  fi
  export DEBIAN_FRONTEND=noninteractive
  local install=("${sudo[@]}" apt-get install -y -q --no-install-recommends "$@")
  "${install[@]}" >/dev/null || { "${sudo[@]}" apt-get update -q >/dev/null && "${install[@]}" >/dev/null; } \
    || fail "apt-get install $* failed"
}
