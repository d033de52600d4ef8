#!/usr/bin/env bash
# Installs plancast as a user would (`pip install .`, no make, no editable install) into fresh virtual
# environments outside the checkout and checks what a new user runs first:
#   1. no extras: import / simulate / validate / schema work; dashboard, run, demo and
#      calibrate --microbench stop with exit 2 and the exact install line; nothing generic lands in
#      site-packages;
#   2. with [runtime,dashboard] (torch installed first, the CPU build where there is no GPU):
#      the demo runs end to end (--no-dashboard) and `dashboard --help` works.
# Usage: scripts/check_install.sh [PYTHON]   (leaves its venvs in $CHECK_DIR, default /tmp/plancast-check)
set -euo pipefail
py="${1:-python3}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${CHECK_DIR:-/tmp/plancast-check}"
rm -rf "$work" && mkdir -p "$work/run"
cd "$work/run"   # never the checkout: imports must come from site-packages
llama="$repo/tests/data/importers/llama3-8b.config.json"
pip_q=(-m pip install --quiet --disable-pip-version-check)

fail() { echo "check_install: FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

# expect_exit2 VENV EXTRA ARGS...: plancast ARGS exits 2 and names `pip install 'plancast[EXTRA]'`
expect_exit2() {
    local venv="$1" extra="$2"; shift 2
    local code=0
    "$venv/bin/plancast" "$@" >"$work/out.txt" 2>"$work/err.txt" || code=$?
    cat "$work/err.txt"
    [ "$code" = 2 ] || fail "plancast $* exited $code, expected 2"
    grep -qF "pip install 'plancast[$extra]'" "$work/err.txt" || fail "plancast $* did not name the install line"
    ! grep -q Traceback "$work/err.txt" || fail "plancast $* printed a traceback"
}

step "1. pip install . (no extras) into $work/base"
"$py" -m venv "$work/base"
"$work/base/bin/python" "${pip_q[@]}" "$repo"
base="$work/base"
"$base/bin/plancast" --version
step "pip show -f plancast: only plancast/ and its metadata in site-packages"
"$base/bin/python" -m pip show -f plancast >"$work/files.txt"
generic=$(grep -E '^\s+(simulator|traces|runtime|dashboard|examples)/' "$work/files.txt" || true)
[ -z "$generic" ] || fail "generic top-level packages installed: $generic"
# top-level names in site-packages (the console script, ../../../bin/plancast, lies outside it)
tops=$(sed -n '/^Files:/,$p' "$work/files.txt" | tail -n +2 | sed 's/^ *//' | grep -v '^\.\./' \
    | cut -d/ -f1 | sort -u)
echo "$tops"
unexpected=$(echo "$tops" | grep -vE '^(plancast|plancast-.*\.dist-info)$' || true)
[ -z "$unexpected" ] || fail "unexpected top-level entries in site-packages: $unexpected"
grep -qE '^\s+plancast/examples/tiny-local-cpu.toml$' "$work/files.txt" || fail "examples are not package data"

step "plancast import hf (Llama 3 8B) -> simulate"
"$base/bin/plancast" import hf "$llama" -o llama.toml
"$base/bin/plancast" simulate llama.toml
"$base/bin/plancast" simulate llama.toml --json >/dev/null
"$base/bin/plancast" schema >s.json
"$base/bin/plancast" dashboard --help >/dev/null
step "missing extras: exit 2 with the install line"
expect_exit2 "$base" dashboard dashboard
expect_exit2 "$base" runtime demo --no-dashboard --out demo
expect_exit2 "$base" runtime run "$(ls "$base"/lib/python*/site-packages/plancast/examples/tiny-local-cpu.toml)" --out r
expect_exit2 "$base" runtime calibrate --microbench -o p.toml
[ ! -e demo ] && [ ! -e r ] || fail "a run directory was created although the runtime is missing"

step "2. torch first, then pip install '.[runtime,dashboard]' into $work/full"
"$py" -m venv "$work/full"
full="$work/full"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$full/bin/python" "${pip_q[@]}" "${TORCH_SPEC:-torch}"
else
    "$full/bin/python" "${pip_q[@]}" "${TORCH_SPEC:-torch==2.13.0}"
fi
"$full/bin/python" "${pip_q[@]}" "$repo[runtime,dashboard]"
"$full/bin/plancast" dashboard --help >/dev/null
"$full/bin/plancast" import hf "$llama" -o llama.toml
"$full/bin/plancast" simulate llama.toml >/dev/null
step "plancast demo --no-dashboard"
if ! "$full/bin/plancast" demo --no-dashboard --out demo 2>&1 | tee "$work/demo.txt"; then
    fail "plancast demo failed"
fi
if grep -nE 'ERROR|WARNING|Traceback' "$work/demo.txt"; then fail "the demo printed the lines above"; fi
echo; echo "check_install: OK"
