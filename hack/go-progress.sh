# Progress for long `go build`s (sourced by hack/build-control-plane.sh).
#
#   go build -v ... 2>&1 >/dev/null | go_progress WHAT TOTAL
#
# `go build -v` names each package on stderr as it compiles it. This reads those lines and logs a
# line at most every GO_PROGRESS_EVERY seconds (default 30): packages compiled out of TOTAL (the
# build's dependencies, `go list -deps`; cached packages are not compiled again, so a warm build
# ends below it), the time so far and an estimate of the time left at the pace so far. Any other
# line (compiler errors: `# pkg`, `file.go:1:2: ...`) is passed through to stderr as it is.
# Needs `log` (the caller's) and `set -o pipefail` so that a failed build still fails.

go_progress() {
  local what=$1 total=$2 every=${GO_PROGRESS_EVERY:-30}
  local start=$SECONDS last=$SECONDS n=0 line elapsed left
  while IFS= read -r line; do
    case $line in
      *' '* | '#'* | '') printf '%s\n' "$line" >&2; continue ;;
    esac
    n=$((n + 1))
    if [ $((SECONDS - last)) -ge "$every" ]; then
      last=$SECONDS
      elapsed=$((SECONDS - start))
      left=""
      if [ "$n" -lt "$total" ] && [ "$elapsed" -gt 0 ]; then
        left=", about $(_go_progress_time $(((total - n) * elapsed / n))) left at this pace"
      fi
      log "$what: $n/$total packages compiled, $(_go_progress_time "$elapsed") so far$left (now $line)"
    fi
  done
  log "$what: $n package(s) compiled in $(_go_progress_time $((SECONDS - start)))"
}

_go_progress_time() {
  local s=$1
  if [ "$s" -ge 60 ]; then
    printf '%dm%02ds' $((s / 60)) $((s % 60))
  else
    printf '%ds' "$s"
  fi
}
