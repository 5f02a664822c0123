"""caption_images: a detailed caption of every kept image, written with the page text around it
(M2RAG §5.2: "for LLMs, since they could not process images directly, the detailed captions of
images ... are provided"; the ablation after Figure 4: captions "as detailed as possible", with
"textual contexts associated with the images ... included during the captioning process"; §5.1:
the captions are GPT-4o's). The seed prints no caption prompt: prompts/m2rag_caption_image is ours
and says so.

Input `images`: the kept images (phash_dedup's images_deduped, or images_cached rows): page
images (owner_id = the page) and auxiliary images (owner_id = the query). Input `refs`
(m2rag_image_refs of gather_images, joined on owner_id and url): the alt text and the context of
each image (the page text around its placeholder; an auxiliary image's result title and snippet).

The captioner is a vision-language model role (`llm`, the run-wide section with this stage's
overrides; M2RAG: GPT-4o). How the image is given is recorded per row as `mode`: `image` when the
backend takes images (openai, vllm, or `vision: true`; llm.image_max_side scales it first), else
`text_stand_in`: the embedded text-only model writes the caption from the alt text and the
context alone, our gap-filler for offline runs.

Output `captions` (m2rag_image_captions): one per kept image row. Rejects: `invalid_answer` (not a
JSON object with a non-empty caption after the client's retries; the raw text in the detail).
Invariant: image rows in = captions + rejected.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"
PROMPT = "m2rag_caption_image"


def run(ctx) -> None:
    p = ctx.params
    vision = sees_images(p)
    refs = {(r["owner_id"], r["url"]): r for r in ctx.read_rows("refs")}
    jobs = []
    for image in sorted(ctx.read_rows("images"), key=lambda r: (r["query_id"], r["owner_id"], r["position"], r["url"])):
        with ctx.item(image["ref_id"]):
            ref = refs.get((image["owner_id"], image["url"]), {})
            variables = {"stand_in": not vision, "alt": ref.get("alt", ""), "context": ref.get("context", "")}
            jobs.append((image, LLMRequest(image["ref_id"], PROMPT, variables, images=[image["sha256"]] if vision else [])))
    mode = "image" if vision else "text_stand_in"
    writer = ctx.writer("captions")
    with LLMClient.from_params(p["llm"], stats=ctx.stats) as client:
        answers = client.run([request for _, request in jobs], desc="caption images")
    for (image, _), answer in zip(jobs, answers):
        with ctx.item(image["ref_id"], counted=False):
            if not answer.ok:
                raise Reject("invalid_answer", f"{PROMPT}: {answer.detail}")
            writer.write({"ref_id": image["ref_id"], "owner_id": image["owner_id"], "query_id": image["query_id"], "url": image["url"],
                          "sha256": image["sha256"], "caption": " ".join(answer.value["caption"].split()), "mode": mode})
            ctx.stats[f"captioned_{mode}"] += 1


STAGE = Stage(
    name="caption_images",
    version=VERSION,
    doc=__doc__,
    inputs={
        "images": Input("the kept images (images_deduped or images_cached rows)", many=True, table="images_cached"),
        "refs": Input("m2rag_image_refs of gather_images: each image's alt text and surrounding text", many=True, optional=True,
                      table="m2rag_image_refs"),
    },
    outputs={"captions": Output("m2rag_image_captions", "one detailed caption per kept image")},
    params={
        "llm": Param(dict, {}, "the captioner (M2RAG §5.1: GPT-4o): the config llm: section, per-stage overrides merged in", schema="llm"),
        "vision": Param(bool, None, "show the image itself; null = what the backend takes (llamacpp: no, text stand-in)"),
    },
    run=run,
    prompts=("m2rag_caption_image",),
    rejects={"invalid_answer": "not a JSON object with a non-empty caption after the client's retries (raw text in the detail)"},
)

if __name__ == "__main__":
    STAGE.main()
