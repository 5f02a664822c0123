#!/usr/bin/env bash
# Run the vllm backend's test on a machine with a CUDA GPU (the CPU machines skip it).
#   scripts/run_vllm_gpu.sh MODEL        (or CITEFORGE_VLLM_MODEL=MODEL scripts/run_vllm_gpu.sh)
# MODEL (required): a local model folder, or a Hub id already in the local cache. Nothing is
# downloaded: the test skips, saying why, when MODEL is neither.
# Installs the [gpu,test] extras when vllm is missing (needs the package registry), then runs the
# gpu-marked test, which loads one offline vllm.LLM and sends a whole batch in one chat call.
set -euo pipefail
cd "$(dirname "$0")/.."
export CITEFORGE_VLLM_MODEL="${1:-${CITEFORGE_VLLM_MODEL:-}}"
if [ -z "$CITEFORGE_VLLM_MODEL" ]; then
    echo "usage: $0 MODEL  (a local model folder, or a Hub id already in the local cache; nothing is downloaded)" >&2
    exit 2
fi
export HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python -c "import vllm" 2>/dev/null || python -m pip install -e '.[gpu,test]'
python -c "import vllm; print('vllm', vllm.__version__)"
python -m pytest -m gpu tests/test_llm_vllm.py -v -rs
