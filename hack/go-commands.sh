# Sourced by the build scripts of Go commands cached by version (hack/build-nvidia-plugin.sh,
# hack/build-mig-parted.sh): build_go_commands builds the commands of a module that $BIN lacks.
# shellcheck shell=bash
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

# build_go_commands MODULE WHAT COLD_NOTE [--print-bin] -- COMMAND...
#   With $MOD (the Go module of the project's that pins MODULE), $VERSION (its version), $BIN (the
#   cache folder) and log() set: returns at once when $BIN has every COMMAND, else builds the
#   missing ones (cgo) from MODULE/cmd/<command> into $BIN. WHAT names them in errors, COLD_NOTE
#   says how long a cold build takes. --print-bin prints $BIN at the end.
build_go_commands() {
  local module=$1 what=$2 note=$3 print=""
  shift 3
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    [ "$1" = "--print-bin" ] && print=1
    shift
  done
  [ $# -gt 0 ] && shift
  local commands=("$@") missing=() pkgs=() cmd total
  [ -n "$VERSION" ] || { log "no $module line in $MOD/go.mod"; exit 1; }
  for cmd in "${commands[@]}"; do [ -x "$BIN/$cmd" ] || missing+=("$cmd"); done
  if [ ${#missing[@]} -eq 0 ]; then
    log "${commands[*]} $VERSION present in $BIN"
    [ -n "$print" ] && echo "$BIN"
    return 0
  fi
  command -v go >/dev/null || { log "Go is required to build $what (https://go.dev/dl); none found on PATH"; exit 1; }
  command -v "${CC:-gcc}" >/dev/null || { log "a C compiler (gcc) is required: $what is built with cgo"; exit 1; }
  cd "$MOD"
  log "downloading the modules of $module $VERSION"
  go mod download
  for cmd in "${missing[@]}"; do pkgs+=("$module/cmd/$cmd"); done
  total=$(go list -deps "${pkgs[@]}" | wc -l)
  log "compiling ${missing[*]} $VERSION: $total packages ($note)"
  mkdir -p "$BIN.tmp"
  go build -v -ldflags='-s -w' -o "$BIN.tmp/" "${pkgs[@]}" 2>&1 >/dev/null | go_progress "${missing[*]} $VERSION" "$total"
  mkdir -p "$BIN"
  for cmd in "${missing[@]}"; do mv "$BIN.tmp/$cmd" "$BIN/"; done
  rmdir "$BIN.tmp"
  go version -m "$BIN/${missing[0]}" | awk '$1 == "mod" || $1 == "path"' >&2
  [ -n "$print" ] && echo "$BIN"
  log "${commands[*]} ready in $BIN"
}
