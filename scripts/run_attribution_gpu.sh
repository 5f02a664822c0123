#!/usr/bin/env bash
# Attribution while generating (cite-while-you-generate) with a real vision-language model on a GPU.
#   scripts/run_attribution_gpu.sh MODEL_DIR [ITEMS.jsonl]
# MODEL_DIR: a local folder of an HF vision-language model (e.g. Qwen2.5-VL-7B-Instruct or
# llava-v1.6-mistral-7b-hf); nothing is downloaded. ITEMS: an items JSONL (format in
# stages/attribution/attribution_inputs.py); default: the gpu test's synthetic item with an image.
# Runs, with bf16 weights and eager attention on cuda:
#   1. the gpu-marked test (TEXT, IMG_RAW and IMG_CAP on one item; checks spans and the image citation);
#   2. the stages on ITEMS in all three modes, then Algorithm 1 with the seed's Qwen2.5-VL setting
#      (k=3, τ=0.16; for LLaVA-NeXT use K=5 TAU=0.12), printing each summary sentence's citations;
#   3. the memory benchmark (capture vs output_attentions) on the GPU.
# Outputs land in data/runs/gpu-attribution/ (Parquet and the benchmark's text).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:?usage: $0 MODEL_DIR [ITEMS.jsonl]}"
K="${K:-3}"
TAU="${TAU:-0.16}"
OUT=data/runs/gpu-attribution
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 CITEFORGE_ATTRIBUTION_VLM="$MODEL"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python -m pytest -m gpu tests/test_attribution_gpu.py -v -rs
ITEMS="${2:-}"
if [ -z "$ITEMS" ]; then
    ITEMS="$OUT/items.jsonl"
    python -c "from tests.test_attribution_gpu import write_items; write_items('$OUT')"
fi
python -m stages.attribution.attribution_inputs --input jsonl="$ITEMS" --output source_items="$OUT/items.parquet"
python -m stages.attribution.generate_attributed --input source_items="$OUT/items.parquet" --output generations="$OUT/generations.parquet" \
    --params "{\"model\": \"$MODEL\", \"model_name\": \"$(basename "$MODEL")\", \"modes\": [\"text\", \"img_raw\", \"img_cap\"], \"dtype\": \"bfloat16\", \"device\": \"cuda\", \"max_new_tokens\": 128}"
python -m stages.attribution.attribute_attention --input generations="$OUT/generations.parquet" --output citations="$OUT/citations.parquet" \
    --param k="$K" --param tau="$TAU"
python - "$OUT" <<'PY'
import sys
import duckdb
out = sys.argv[1]
print(duckdb.sql(f"select g.mode, c.sentence_index, c.sources, round(c.image_score, 4) as image_share, c.sentence "
                 f"from '{out}/citations.parquet' c join '{out}/generations.parquet' g on g.id = c.generation_id order by 1, 2"))
print(duckdb.sql(f"select mode, prompt_tokens, len(token_sentence) as tokens, seconds, peak_layer_weight_bytes from '{out}/generations.parquet'"))
PY
python benchmarks/bench_attention_memory.py --model "$MODEL" --device cuda --source-sentences 80 --new-tokens 64 | tee "$OUT/bench_attention_memory.txt"
