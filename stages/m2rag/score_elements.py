"""Score every page element and auxiliary image for its query (M2RAG §4.3 "Element Evaluation",
App. B figures 8-9): "a score from 0 to 10 for each element, where higher scores indicate better
relevancy", which replaces embedding similarity for the In-Doc retrieval of generation.

`kinds` says what one run scores, so a family can run the text and the image scorers as separate
rules (editing the figure 8 prompt then reruns the text scores only):
- `text`: text pieces go to the text scorer (`llm`; M2RAG: DeepSeek-Chat) with the figure 8
  prompt (prompts/m2rag_score_text): a one-line analysis and an integer score;
- `image`: page images, and with an `images` input the auxiliary images, go to the image scorer
  (`vision_llm` over `llm`; M2RAG: MiniCPM-V-2.6) with the figure 9 prompt
  (prompts/m2rag_score_image), which answers the score alone.

Images. With the optional `images` input (the kept images: phash_dedup's images_deduped rows,
keyed by owner_id and url) only kept images are scored: a page image whose (page, url) is not
among them was dropped by cache_images, filter_images or phash_dedup and is rejected
`image_not_kept`; rows owned by their query (owner_id = query_id) are the auxiliary images of
image search, scored as rows of kind `aux_image` (element_id = the image's ref_id, no page, order
= the search rank from `refs`). How an image is shown is recorded per row as `mode`:
- `image`: the scorer takes images (openai/vllm backends, or `vision: true`) and sees the stored
  image (llm.image_max_side scales it first);
- `text_stand_in`: a text-only scorer (the embedded llamacpp model) reads the image's alt text
  and the page text around its placeholder (auxiliary images: the result title and snippet, from
  the optional `refs` input) instead. This is our gap-filler, not the seed's.

A score is exactly an integer 0-10 (the answer schemas bound it): a score outside the scale, a
non-integer or a missing score is an invalid answer, retried by the LLM client, then rejected
`invalid_answer` with the raw text. Never defaulted. Thresholds (the seed's code keeps >= 3) are
params of the stages that use the scores (release_m2rag's min_image_score), so changing them
reruns no model call.

Inputs: `elements` (retrieval_elements, from split_pages), `queries` (m2rag_sampled_queries: the
query text by id), `images` (optional, images_cached or images_deduped rows), `refs` (optional,
m2rag_image_refs of gather_images). Output: `scored_elements` (m2rag_scored_elements): the element
columns plus score, analysis, mode, image_sha256. Rejects: `invalid_answer`, `unknown_query` (an
element of a query not in `queries`), `image_not_kept` (an `images` input is given and the page
image is not in it). Invariant: elements of the scored kinds (+ auxiliary images) in = scored + rejected.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.pages import image_placeholder, surrounding_text
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "2"
TEXT_PROMPT = "m2rag_score_text"
IMAGE_PROMPT = "m2rag_score_image"


def image_request(item_id: str, question: str, vision: bool, sha: str, alt: str, context: str) -> tuple[str, LLMRequest]:
    """(mode, the figure 9 request): the stored image itself, or its text stand-in."""
    if vision:
        return "image", LLMRequest(item_id, IMAGE_PROMPT, {"question": question, "stand_in": False}, images=[sha])
    return "text_stand_in", LLMRequest(item_id, IMAGE_PROMPT, {"question": question, "stand_in": True, "alt": alt, "context": context})


def run(ctx) -> None:
    p = ctx.params
    if "{n}" not in p["placeholder"]:
        raise StageError(f"param placeholder must contain {{n}}, got {p['placeholder']!r}")
    kinds = set(p["kinds"])
    text_llm = p["llm"]
    image_llm = {**p["llm"], **p["vision_llm"]}
    vision = "image" in kinds and sees_images({"vision": p["vision"], "llm": image_llm})
    if vision and not ctx.has_input("images"):
        raise StageError("the image scorer takes images (vision) but no `images` input (the kept images) was given")
    questions = {q["id"]: q["question"] for q in ctx.read_rows("queries")}
    kept = {(r["owner_id"], r["url"]): r for r in ctx.read_rows("images")} if "image" in kinds else {}
    refs = {(r["owner_id"], r["url"]): r for r in ctx.read_rows("refs")} if "image" in kinds else {}
    elements = ctx.read_rows("elements")

    # requests: the chunk before an image (in page order) holds its placeholder, so it is the image's context
    text_jobs, image_jobs, chunk = [], [], {}
    for el in sorted(elements, key=lambda e: (e["page_id"], e["order"])):
        if el["kind"] == "text":
            chunk[el["page_id"]] = el["text"]
        if el["kind"] not in kinds:
            continue
        with ctx.item(el["element_id"]):
            question = questions.get(el["query_id"])
            if question is None:
                raise Reject("unknown_query", f"element of query {el['query_id']!r}, which is not in the queries input")
            if el["kind"] == "text":
                example = image_placeholder(p["placeholder"], 1)
                request = LLMRequest(el["element_id"], TEXT_PROMPT, {"query": question, "piece": el["text"], "placeholder_example": example})
                text_jobs.append((el, "", "text", request))
                continue
            image = kept.get((el["page_id"], el["image_url"]))
            if ctx.has_input("images") and image is None:
                raise Reject("image_not_kept", f"{el['image_url']} of page {el['page_id']}: not among the kept images "
                                               "(dropped by cache_images, filter_images or phash_dedup)")
            sha = image["sha256"] if image else ""
            context = surrounding_text(chunk.get(el["page_id"], ""), image_placeholder(p["placeholder"], el["placeholder"]), p["context_chars"])
            image_jobs.append((el, sha, *image_request(el["element_id"], question, vision, sha, el["text"], context)))
    # auxiliary images (image search): owned by their query, not by a page
    for image in sorted((r for r in kept.values() if r["owner_id"] == r["query_id"]), key=lambda r: (r["query_id"], r["url"])):
        with ctx.item(image["ref_id"]):
            question = questions.get(image["query_id"])
            if question is None:
                raise Reject("unknown_query", f"auxiliary image of query {image['query_id']!r}, which is not in the queries input")
            ref = refs.get((image["owner_id"], image["url"]), {})
            el = {"element_id": image["ref_id"], "page_id": "", "query_id": image["query_id"], "order": ref.get("position", image["position"]),
                  "kind": "aux_image", "text": ref.get("alt", ""), "image_url": image["url"], "placeholder": None, "chars": len(ref.get("alt", ""))}
            image_jobs.append((el, image["sha256"], *image_request(image["ref_id"], question, vision, image["sha256"], ref.get("alt", ""), ref.get("context", ""))))

    writer = ctx.writer("scored_elements")
    for llm, jobs, desc in ((text_llm, text_jobs, "score text"), (image_llm, image_jobs, "score images")):
        if not jobs:
            continue
        with LLMClient.from_params(llm, stats=ctx.stats) as client:
            answers = client.run([job[-1] for job in jobs], desc=desc)
        for (el, sha, mode, request), answer in zip(jobs, answers):
            with ctx.item(el["element_id"], counted=False):
                if not answer.ok:
                    raise Reject("invalid_answer", f"{request.prompt}: {answer.detail}")
                writer.write({**el, "score": answer.value["score"], "analysis": answer.value.get("analysis", ""), "mode": mode, "image_sha256": sha})
                ctx.stats[f"scored_{mode}"] += 1


STAGE = Stage(
    name="score_elements",
    version=VERSION,
    doc=__doc__,
    inputs={
        "elements": Input("retrieval_elements from split_pages", many=True, table="retrieval_elements"),
        "queries": Input("m2rag_sampled_queries: the query text of each element's query_id", many=True, table="m2rag_sampled_queries"),
        "images": Input("the kept images (images_deduped or images_cached rows: owner_id = page id, or the query id for an auxiliary image; url; sha256)",
                        many=True, optional=True, table="images_cached"),
        "refs": Input("m2rag_image_refs of gather_images: the auxiliary images' rank, title and snippet", many=True, optional=True, table="m2rag_image_refs"),
    },
    outputs={"scored_elements": Output("m2rag_scored_elements", "the elements with their 0-10 scores")},
    params={
        "kinds": Param(list, ["text", "image"], "what this run scores: text (figure 8), image (figure 9: page and auxiliary images)",
                       items=Param(str, choices=("text", "image"))),
        "llm": Param(dict, {}, "the text scorer (figure 8; M2RAG: DeepSeek-Chat): the config llm: section, per-stage overrides merged in", schema="llm"),
        "vision_llm": Param(dict, {}, "the image scorer (figure 9; M2RAG: MiniCPM-V-2.6): keys replacing those of llm", schema="llm"),
        "vision": Param(bool, None, "show the image itself; null = what the image scorer's backend takes (llamacpp: no, text stand-in)"),
        "placeholder": Param(str, "<image_{n}>", "split_pages' image placeholder, to find an image's surrounding text"),
        "context_chars": Param(int, 300, "surrounding text shown either side of an image's placeholder (text stand-in)", min=0),
    },
    run=run,
    prompts=("m2rag_score_text", "m2rag_score_image"),
    rejects={
        "unknown_query": "an element or auxiliary image of a query not in the queries input",
        "image_not_kept": "the page image is not among the kept images (dropped by cache_images, filter_images or phash_dedup)",
        "invalid_answer": "no integer score 0-10 after the client's retries (raw text in the detail)",
    },
)

if __name__ == "__main__":
    STAGE.main()
