#!/usr/bin/env bash
# Test-only system packages: Debian's chromium for the dashboard's headless-browser test.
# Best effort: without root or apt the browser test skips with a clear reason instead.
set -u
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium for the browser test (apt-get)"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
        || echo "setup: could not install chromium; the browser test will be skipped"
else
    echo "setup: chromium not found and cannot be installed here; the browser test will be skipped"
fi
exit 0
