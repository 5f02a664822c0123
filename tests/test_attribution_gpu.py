"""Attribution while generating with a real vision-language model on a GPU (bf16, eager attention):
TEXT, IMG_RAW and IMG_CAP on one synthetic item with an image. Skipped without a CUDA GPU or without
CITEFORGE_ATTRIBUTION_VLM naming a local model folder (Qwen2.5-VL-7B-Instruct, LLaVA-NeXT, or any
HF vision-language model); never downloads. scripts/run_attribution_gpu.sh runs it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from stages.attribution.attribution_inputs import parse_item
from stages.attribution.generate_attributed import summarise
from stages.attribution.attention import IMAGE, load_runner
from stages.attribution.attribution import IMG, attribute

MODEL = os.environ.get("CITEFORGE_ATTRIBUTION_VLM", "")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not Path(MODEL).is_dir(), reason="set CITEFORGE_ATTRIBUTION_VLM to a local vision-language model folder"),
]

SOURCE = ("Doctor: What brings you in today? Patient: My right eye has been red and itchy for three days. "
          "Doctor: Any discharge or change in vision? Patient: A little sticky discharge in the morning, vision is fine. "
          "<image> Doctor: It looks like bacterial conjunctivitis. Doctor: Use antibiotic eye drops four times a day for a week.")


def write_items(folder: str | Path) -> Path:
    """One dialogue with a drawn 'red eye' image, as an items JSONL."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    img = Image.new("RGB", (448, 448), "white")
    draw = ImageDraw.Draw(img)
    draw.ellipse((64, 144, 384, 304), fill=(250, 230, 230), outline="black", width=6)
    draw.ellipse((164, 164, 284, 284), fill=(200, 30, 30))
    draw.ellipse((204, 204, 244, 244), fill="black")
    img.save(folder / "eye.png")
    path = folder / "items.jsonl"
    path.write_text(json.dumps({"id": "gpu-eye", "source": SOURCE, "image": "eye.png", "image_description": "a drawing of a red eye"}) + "\n")
    return path


@pytest.fixture(scope="module")
def runner():
    return load_runner(MODEL, dtype="bfloat16", device="cuda")


@pytest.fixture(scope="module")
def item(tmp_path_factory):
    path = write_items(tmp_path_factory.mktemp("gpu_items"))
    return parse_item(json.loads(path.read_text()), path.parent)


@pytest.mark.parametrize("mode", ["text", "img_raw", "img_cap"])
def test_modes_on_a_real_vlm(runner, item, mode):
    params = {"model_name": "vlm", "max_new_tokens": 96, "summary_sentences": 3, "caption_tokens": 48}
    row = summarise(runner, item, mode, params)
    labels = np.asarray(row["source_labels"])
    assert row["summary_sentences"] and len(row["pooled"]) == len(row["token_sentence"])
    assert set(range(len(row["units"]))) <= set(labels[labels >= 0].tolist())  # every unit has tokens
    assert (IMAGE in labels) == (mode == "img_raw")
    cited, means = attribute(np.asarray(row["pooled"]), labels, row["units"], row["token_sentence"], len(row["summary_sentences"]),
                             k=3, tau=0.16, mode=mode)
    if mode == "img_raw":
        assert sum(IMG in c for c in cited) == 1
    for sentence, sources in zip(row["summary_sentences"], cited):
        print(f"{mode}: {sources} {sentence}")
    print(f"{mode}: {row['prompt_tokens']} prompt tokens, {len(row['token_sentence'])} generated, {row['seconds']} s, "
          f"peak layer tensor {row['peak_layer_weight_bytes'] / 2**20:.1f} MiB, CUDA peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
