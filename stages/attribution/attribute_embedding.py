"""Sentence-embedding baseline (cite-while-you-generate.txt §4.2 "Embedding similarity", App. C).

Source and summary sentences are embedded with all-MiniLM-L6-v2 (the packaged copy, never a hub);
each summary sentence cites the source sentences whose cosine similarity is at least `threshold`,
most similar first, at most `max_sources`. When the generation has the image as evidence, CLIP
(open_clip, `clip_model` with local `clip_weights`) embeds the image and the summary sentences; the
image goes to the one most similar sentence, at most once per summary, and when that sentence
already holds max_sources the least similar of them makes room (App. C's code). The seed reports
only its best threshold and does not print it: `threshold` is a param to sweep.

img_cap generations are attributed on the source sentences without the caption (the embedding
baseline reads the image through CLIP, as in the seed). Without clip_weights an image generation
fails the stage, unless clip_random (tests only: random weights, meaningless scores).

Input: generations (attr_generations). Output: citations (attr_citations, method embedding), one
row per summary sentence. Rejects: image_missing (the generation shows the image, but its item's image
file is missing or unreadable); nothing else per generation.
"""
from __future__ import annotations

import numpy as np

from stages.attribution.attribution import IMG, every_generation, order_units
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.text_index import load_encoder

VERSION = "1"


class Clip:
    def __init__(self, model_name: str, weights: str | None, device: str):
        import open_clip
        import torch

        self.torch = torch
        self.device = device
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(model_name, pretrained=weights or None, device=device)
        self.model.eval()
        self.tokenizer = open_clip.get_tokenizer(model_name)

    def similarities(self, image, texts: list[str]) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            img = self.model.encode_image(self.preprocess(image).unsqueeze(0).to(self.device))
            txt = self.model.encode_text(self.tokenizer(texts).to(self.device))
            img = torch.nn.functional.normalize(img, dim=-1)
            txt = torch.nn.functional.normalize(txt, dim=-1)
            return (txt @ img.T).squeeze(-1).float().cpu().numpy()


def choose(sim_text: np.ndarray, threshold: float, max_sources: int, image_scores: np.ndarray | None) -> list[list[str]]:
    """App. C's assignment: per summary sentence the sources at or above the threshold, most similar
    first, at most max_sources; the image to the argmax sentence of image_scores, once."""
    out = []
    best_image = int(np.argmax(image_scores)) if image_scores is not None and image_scores.size else -1
    for i, row in enumerate(sim_text):
        order = np.argsort(-row, kind="stable")
        chosen = [str(int(j)) for j in order if row[j] >= threshold][:max_sources]
        if i == best_image:
            chosen = chosen[: max_sources - 1] + [IMG]
        out.append(order_units(chosen))
    return out


def _source_sentences(gen: dict) -> tuple[list[str], list[str]]:
    """The text sources (units and sentences) without an img_cap caption."""
    pairs = [(u, s) for u, s in zip(gen["units"], gen["source_sentences"]) if u != IMG]
    return [u for u, _ in pairs], [s for _, s in pairs]


def run(ctx):
    params = ctx.params
    gens = ctx.read_rows("generations")
    device = params["device"]
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    encoder = load_encoder(device)
    clip: list[Clip] = []  # loaded at the first image read: an input whose images are all missing loads none
    if any(g["has_image"] for g in gens) and not params["clip_weights"] and not params["clip_random"]:
        raise StageError("generations with an image need CLIP: set clip_weights to a local open_clip checkpoint")
    items = {r["id"]: r for r in ctx.read_rows("source_items")}
    from PIL import Image

    from stages.core.images import DECODED_FORMATS

    for gen in gens:
        with ctx.item(gen["id"]):
            units, sources = _source_sentences(gen)
            summary = gen["summary_sentences"]
            sim = np.zeros((len(summary), len(sources)), dtype=np.float32)  # nothing to compare when either side is empty
            if summary and sources:
                sim = (encoder.encode(summary, normalize_embeddings=True, convert_to_numpy=True)
                       @ encoder.encode(sources, normalize_embeddings=True, convert_to_numpy=True).T)
            image_scores = None
            if gen["has_image"]:
                path = items.get(gen["item_id"], {}).get("image")
                if not path:
                    raise Reject("image_missing", f"item {gen['item_id']} has no image in the items input")
                try:
                    with Image.open(path, formats=DECODED_FORMATS) as im:
                        image = im.convert("RGB")
                except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                    raise Reject("image_missing", f"item {gen['item_id']}: {path}: {type(err).__name__}: {err}") from None
                if not clip:
                    clip.append(Clip(params["clip_model"], params["clip_weights"] or None, device))
                image_scores = clip[0].similarities(image, summary) if summary else np.zeros(0, dtype=np.float32)
            chosen = choose(sim, params["threshold"], params["max_sources"], image_scores)
            chosen = [[units[int(u)] if u != IMG else IMG for u in c] for c in chosen]
            ctx.write("citations", [{
                "id": f"cite:embedding:{gen['id']}:{j}", "generation_id": gen["id"], "item_id": gen["item_id"],
                "mode": gen["mode"], "method": "embedding", "sentence_index": j, "sentence": s,
                "sources": order_units(chosen[j]),
                "image_score": float(image_scores[j]) if image_scores is not None else None,
            } for j, s in enumerate(summary)])
            ctx.stats["generations_attributed"] += 1


STAGE = Stage(
    name="attribute_embedding",
    version=VERSION,
    doc=__doc__,
    inputs={
        "generations": Input("attr_generations from generate_attributed", table="attr_generations"),
        "source_items": Input("attr_items (the image files)", table="attr_items"),
    },
    outputs={"citations": Output("attr_citations", "one row per summary sentence", counted=False)},
    params={
        "threshold": Param(float, 0.5, "cosine similarity a source sentence needs to be cited", min=-1, max=1),
        "max_sources": Param(int, 10, "most sources one summary sentence cites (App. C)", min=1),
        "clip_model": Param(str, "ViT-B-32", "open_clip architecture placing the image (§4.2)"),
        "clip_weights": Param(str, "", "local open_clip checkpoint (required when a generation has an image)"),
        "clip_random": Param(bool, False, "tests only: random CLIP weights when clip_weights is empty"),
        "device": Param(str, "auto", "auto, cpu, cuda or cuda:N", pattern=r"^(auto|cpu|cuda(:\d+)?)$"),
    },
    run=run,
    invariant=every_generation,
    rejects={"image_missing": "the generation has the image as evidence but its item has no image in source_items"},
)

if __name__ == "__main__":
    STAGE.main()
