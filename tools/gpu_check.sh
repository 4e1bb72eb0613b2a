#!/usr/bin/env bash
# The prepared GPU check (run by hand on a CUDA machine, never in CI): the CUDA path in
# float32 and bfloat16 with the model's chat template, batch-size invariance, the automatic
# batch size per row width, and parity
# with lm-evaluation-harness on a few items with the chat template applied by both tools,
# and generation speed in bfloat16 against lm-eval's HF backend (tokens/s, the share of the
# GPU's measured memory read rate the forward passes reach); where vLLM is installed, the
# vllm backend in bfloat16 on CUDA, with the chat template: parity and speed against
# lm-eval's --model vllm, and item agreement (and time) against our hf backend.
#   tools/gpu_check.sh MODEL_DIR DATA_DIR OUT_DIR
set -euo pipefail
model=${1:?model directory}; data=${2:?benchmark data directory}; out=${3:?output directory}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.csv"
python -m tools.cuda_check --model "$model" --data-dir "$data" --chat auto \
    --out "$out/cuda_check.json"
python -m tools.batch_invariance --model "$model" --data-dir "$data" --device cuda \
    --dtype bfloat16 --tasks mmlu:100,gsm8k:50 --batch-sizes 1,4,16 --chat on,off \
    --out "$out/invariance_bf16"
# --llm-batch-size=auto on the GPU: probed for 2,048-token rows, then again for a call with
# a row of about 6,000 tokens (the sizes per width, found now in a cache of their own).
LLMEVAL_CACHE_DIR="$out/auto_batch_cache" python - "$model" <<'PY' | tee "$out/auto_batch.json"
import json
import sys

from pytest_llmeval.model import LoglikelihoodRequest, ModelSettings, load_backend

backend = load_backend(ModelSettings(model=sys.argv[1], batch_size=0, device="cuda"))
backend.loglikelihood([LoglikelihoodRequest("word " * 6000, " end"), LoglikelihoodRequest("a", " b")])
info = backend.info()
keys = ("device_name", "dtype", "max_length", "batch_size", "batch_size_source", "batch_size_by_width")
print(json.dumps({k: info[k] for k in keys}))
PY
if python -c "import lm_eval" 2>/dev/null; then
    python -m tools.parity --model "$model" --data-dir "$data" --device cuda \
        --dtype bfloat16 --chat --items 20 --tasks mmlu,gsm8k --out "$out/parity_chat_bf16"
    python -m tools.speed --model "$model" --data-dir "$data" --device cuda \
        --dtype bfloat16 --tasks gsm8k,bbh --items 100 --chunk-items 8 --out "$out/speed_bf16"
else
    echo "lm-eval is not installed: parity and speed skipped" | tee "$out/parity_skipped.txt"
fi
if python -c "import vllm, lm_eval" 2>/dev/null; then
    python -m tools.speed --engine vllm --no-memory --model "$model" --data-dir "$data" \
        --dtype bfloat16 --chat --tasks mmlu,mmlu_continuation,gsm8k --items 200 \
        --out "$out/speed_vllm_bf16"
    for task in mmlu gsm8k; do
        /usr/bin/time -v python -m pytest_llmeval.eval.agreement --task "benchmarks/$task.yaml" \
            --a "hf:$model" --b "vllm:$model" --dtype bfloat16 --chat-template on \
            --limit 200 --data-dir "$data" --out "$out/agreement_vllm_$task.json" \
            2> "$out/agreement_vllm_$task.time"
    done
else
    echo "vLLM or lm-eval is not installed: the vllm backend's checks skipped" \
        | tee "$out/vllm_skipped.txt"
fi
