#!/usr/bin/env bash
# Creates the virtual environment and installs plancast with every extra.
# torch: reuse one that is already installed (CUDA builds included); otherwise install the CPU
# build on machines without an NVIDIA GPU, so no multi-GB CUDA wheel is ever downloaded there.
set -euo pipefail
py="${1:-python3}"
venv="${2:-.venv}"

venv_flags=()
if "$py" -c "import torch" >/dev/null 2>&1; then
    echo "setup: reusing the torch already installed for $py ($("$py" -c 'import torch; print(torch.__version__)'))"
    venv_flags+=(--system-site-packages)
fi
[ -x "$venv/bin/python" ] || "$py" -m venv "${venv_flags[@]}" "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "setup: NVIDIA GPU found; installing a CUDA build of torch"
        "${pip[@]}" "${TORCH_SPEC:-torch}"
    else
        echo "setup: no NVIDIA GPU; installing the CPU build of torch (${TORCH_SPEC:-torch==2.13.0})"
        "${pip[@]}" "${TORCH_SPEC:-torch==2.13.0}"
    fi
fi
"${pip[@]}" -e ".[runtime,dashboard,cluster,dev]"
# HolisticTraceAnalysis (tests load exported traces with it): its package metadata pulls in jupyterlab,
# which it does not need to analyse traces. Install what it imports first, then HTA itself with
# --no-deps as the last step: pip checks for missing requirements only when it resolves dependencies,
# so no later install reports HTA's unused jupyterlab as an ERROR.
"${pip[@]}" plotly pydot psutil pyyaml networkx
"${pip[@]}" --no-deps "holistictraceanalysis>=0.5"
echo "setup: done ($venv)"
