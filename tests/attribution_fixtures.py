"""Hand-written attribution inputs shared by the attribution stages' tests: an items JSONL with one
malformed line of every kind (run through the real attribution_inputs stage), and a stored
generation whose pooled attention gives Algorithm 1's answer by construction."""
import json

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import table_schema

LINES = [
    {"id": "a", "source": "Doctor: Your knee is swollen. Patient: It hurts when I walk. <image> Doctor: Take ibuprofen.",
     "image": "eye.png", "reference": {"summary": "The swollen knee hurts when walking.",
                                       "citations": [{"sentence": "The knee is swollen and hurts.", "sources": [0, 1]},
                                                     {"sentence": "Ibuprofen was advised.", "sources": [2, "IMG"]}]}},
    {"id": "b", "source": "Only text here."},
    "not json",
    {"id": "a", "source": "Duplicate id."},
    {"id": "c", "source": "One. <image> Two. <image>"},
    {"id": "d", "source": "Image gone.", "image": "missing.png"},
    {"id": "e", "source": "Bad reference.", "reference": {"citations": [{"sentence": "x", "sources": [3]}]}},
    {"source": "No id."},
    {"id": "f", "source": "   "},
]


def make_items(tmp_path):
    """attr_items from LINES through the attribution_inputs stage: items a (with an image) and b."""
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(tmp_path / "eye.png")
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in LINES) + "\n")
    out = tmp_path / "items.parquet"
    run_stage("attribution_inputs", "--input", f"jsonl={jsonl}", "--output", f"source_items={out}")
    return out


def generation(item_id="a", mode="img_raw"):
    # 4 source tokens: 2 image tokens, then sentences 0, 1, 2; 4 generated tokens in 2 summary sentences
    return {
        "id": f"gen:{item_id}:{mode}", "item_id": item_id, "model": "m", "mode": mode, "has_image": True, "caption": None,
        "units": ["0", "1", "2"], "source_sentences": ["Doctor: Your knee is swollen.", "Patient: It hurts when I walk.", "Doctor: Take ibuprofen."],
        "summary": "The knee is swollen and hurts. Ibuprofen was advised.",
        "summary_sentences": ["The knee is swollen and hurts.", "Ibuprofen was advised."],
        "token_sentence": [0, 0, 1, 1],
        "source_labels": [-1, -1, 0, 1, 2],
        "pooled": [[0.0, 0.0, 0.6, 0.3, 0.1], [0.05, 0.05, 0.2, 0.6, 0.1], [0.3, 0.3, 0.0, 0.0, 0.4], [0.2, 0.2, 0.1, 0.0, 0.5]],
        "prompt_tokens": 20, "seconds": 0.1, "peak_layer_weight_bytes": 0,
    }


def write_generations(path, gens):
    pq.write_table(pa.Table.from_pylist(gens, schema=table_schema("attr_generations")), path)
    return path
