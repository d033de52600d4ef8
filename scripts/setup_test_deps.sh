#!/usr/bin/env bash
# Test-only system packages: Debian's chromium for the dashboard's headless-browser test, and
# slurm-wlm + munge for the two-node SLURM cluster the `plancast submit` tests start (tests/slurm_cluster.py).
# Best effort: without root or apt the browser and SLURM tests skip with a clear reason instead.
set -u
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v slurmctld >/dev/null 2>&1 || need+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || need+=(munge)
if [ "${#need[@]}" -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${need[*]} for the browser and SLURM tests (apt-get, as root)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null) \
        || echo "setup: could not install ${need[*]}; the tests that need them will be skipped"
else
    echo "setup: ${need[*]} not found and cannot be installed here; the tests that need them will be skipped"
fi
exit 0
