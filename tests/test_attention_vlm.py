"""IMG_RAW and IMG_CAP on a tiny randomly initialised vision-language model built here (a LLaVA
config: CLIP vision tower, Llama decoder, a word-level tokenizer), saved as a local folder and loaded
the way a real VLM is (scripts/run_attribution_gpu.sh): image-token spans, hooks on the decoder only,
and what the capture holds against output_attentions."""
import numpy as np
import pytest
import torch
from PIL import Image

from stages.attribution.generate_attributed import summarise
from stages.attribution.attention import IMAGE, OTHER, build_prompt, decoder_attention, generate, load_runner
from stages.attribution.attribution import IMG, attribute
from tiny_vlm import PATCHES, build_tiny_vlm


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_vlm")
    build_tiny_vlm(folder)
    return load_runner(str(folder), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "eye.png"
    Image.fromarray((np.arange(24 * 24 * 3) % 251).astype(np.uint8).reshape(24, 24, 3)).save(path)
    return path


SENTENCES = ["doctor : the eye is red .", "patient : it hurts since monday ."]
MESSAGES = [{"role": "user", "content": "summarise in one sentence . {SOURCE}"}]


def test_image_block_and_sentence_spans(runner, image):
    assert runner.vision and len(decoder_attention(runner.model)) == 2  # the decoder's, not the vision tower's
    prompt = build_prompt(runner, MESSAGES, SENTENCES, image=Image.open(image).convert("RGB"))
    labels = prompt.labels
    block = np.flatnonzero(labels == IMAGE)
    assert block.size == PATCHES and np.all(np.diff(block) == 1)
    ids = prompt.inputs["input_ids"][0].tolist()
    assert all(ids[p] == runner.image_token_id for p in block)
    for j, sentence in enumerate(SENTENCES):
        positions = np.flatnonzero(labels == j)
        assert positions.min() > block.max()  # the image comes before the text
        assert runner.tokenizer.decode([ids[p] for p in positions]).replace(" ", "") == sentence.replace(" ", "")
    assert "summarise" in runner.tokenizer.decode([i for i, lab in zip(ids, labels) if lab == OTHER])


def test_img_raw_capture_matches_output_attentions_and_holds_less(runner, image):
    prompt = build_prompt(runner, MESSAGES, SENTENCES, image=Image.open(image).convert("RGB"))
    out = generate(runner, prompt, 5)
    with torch.inference_mode():
        naive = runner.model.generate(**prompt.inputs, max_new_tokens=5, do_sample=False, output_attentions=True,
                                      return_dict_in_generate=True, pad_token_id=0)
    positions = torch.as_tensor(prompt.source_positions)
    expected = np.stack([torch.stack([layer[0, :, -1, :].float().mean(0) for layer in step]).mean(0)[positions].numpy()
                         for step in naive.attentions])
    n = len(out.token_ids)
    assert n >= 1
    np.testing.assert_allclose(out.pooled, expected[:n], rtol=1e-4, atol=1e-6)
    naive_bytes = sum(t.numel() * t.element_size() for step in naive.attentions for t in step)
    assert out.pooled.nbytes < naive_bytes
    # the largest tensor the hooks ever saw is one layer's prefill weights, freed at once
    prompt_len = prompt.labels.size
    assert out.peak_weight_bytes == 4 * prompt_len * prompt_len * 4
    share = out.pooled[:, out.source_labels == IMAGE].sum(axis=1)
    assert np.all(share > 0)


def test_img_raw_and_img_cap_items_through_the_stage(runner, image):
    item = {"id": "eye", "sentences": SENTENCES, "image": str(image), "image_position": 1}
    params = {"model_name": "tiny", "max_new_tokens": 6, "summary_sentences": 1, "caption_tokens": 5}
    raw = summarise(runner, item, "img_raw", params)
    assert raw["has_image"] and raw["source_labels"].count(IMAGE) == PATCHES
    cited, means = attribute(np.asarray(raw["pooled"]), np.asarray(raw["source_labels"]), raw["units"], raw["token_sentence"],
                             len(raw["summary_sentences"]), k=3, tau=0.16, mode="img_raw")
    with_tokens = [j for j in range(len(cited)) if raw["token_sentence"].count(j)]
    assert sum(IMG in c for c in cited) == 1  # the image is cited exactly once
    assert IMG in cited[max(with_tokens, key=lambda j: means[j])]
    cap = summarise(runner, item, "img_cap", params)
    assert cap["caption"] and cap["units"] == ["0", IMG, "1"]
    assert cap["source_sentences"][1] == cap["caption"] and IMAGE not in cap["source_labels"]
    assert set(cap["source_labels"]) <= {0, 1, 2}
