"""Score every page element for its query (M2RAG §4.3 "Element Evaluation", App. B figures 8-9):
"a score from 0 to 10 for each element, where higher scores indicate better relevancy", which
replaces embedding similarity for the In-Doc retrieval of generation.

Text pieces (kind text) go to the text scorer with the figure 8 prompt (prompts/m2rag_score_text):
a one-line analysis and an integer score. Images (kind image) go to the image scorer with the
figure 9 prompt (prompts/m2rag_score_image), which answers the score alone. How an image is shown
is recorded per row as `mode`:
- `image`: the scorer takes images (openai/vllm backends, or `vision: true`) and sees the stored
  image, found in the optional `images` input (images_cached rows of this page and url);
- `text_stand_in`: a text-only scorer (the embedded llamacpp model) reads the image's alt text
  and the page text around its placeholder instead. This is our gap-filler, not the seed's.

A score is exactly an integer 0-10 (the answer schemas bound it): a score outside the scale, a
non-integer or a missing score is an invalid answer, retried by the LLM client, then rejected
`invalid_answer` with the raw text. Never defaulted. Thresholds (the seed's code keeps >= 3) are
params of the stages that use the scores, so changing them reruns no model call.

Inputs: `elements` (retrieval_elements, from split_pages), `queries` (m2rag_sampled_queries: the
query text by id), `images` (optional, images_cached). Output: `scored_elements`
(m2rag_scored_elements): the element columns plus score, analysis, mode, image_sha256.
Rejects: `invalid_answer`, `unknown_query` (an element of a query not in `queries`),
`image_not_cached` (mode image and the image is not in `images`). Invariant: elements in =
scored + rejected.
"""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "1"
TEXT_PROMPT = "m2rag_score_text"
IMAGE_PROMPT = "m2rag_score_image"


def surrounding_text(chunk: str, placeholder: str, width: int) -> str:
    """Up to `width` characters either side of the placeholder in its chunk, placeholders dropped."""
    at = chunk.find(placeholder)
    if at < 0:
        return ""
    return " ".join((chunk[max(0, at - width):at] + " " + chunk[at + len(placeholder):at + len(placeholder) + width]).split())


def run(ctx) -> None:
    p = ctx.params
    if "{n}" not in p["placeholder"]:
        raise StageError(f"param placeholder must contain {{n}}, got {p['placeholder']!r}")
    text_llm = p["llm"]
    image_llm = {**p["llm"], **p["vision_llm"]}
    vision = sees_images({"vision": p["vision"], "llm": image_llm})
    if vision and not ctx.has_input("images"):
        raise StageError("the image scorer takes images (vision) but no `images` input (images_cached) was given")
    questions = {q["id"]: q["question"] for q in ctx.read_rows("queries")}
    stored = {(r["owner_id"], r["url"]): r["sha256"] for r in ctx.read_rows("images")} if vision else {}
    elements = ctx.read_rows("elements")

    # requests: the chunk before an image (in page order) holds its placeholder, so it is the image's context
    text_jobs, image_jobs, chunk = [], [], {}
    for el in sorted(elements, key=lambda e: (e["page_id"], e["order"])):
        with ctx.item(el["element_id"]):
            question = questions.get(el["query_id"])
            if question is None:
                raise Reject("unknown_query", f"element of query {el['query_id']!r}, which is not in the queries input")
            if el["kind"] == "text":
                chunk[el["page_id"]] = el["text"]
                example = p["placeholder"].format(n=1)
                text_jobs.append((el, LLMRequest(el["element_id"], TEXT_PROMPT, {"query": question, "piece": el["text"], "placeholder_example": example})))
                continue
            if vision:
                sha = stored.get((el["page_id"], el["image_url"]))
                if sha is None:
                    raise Reject("image_not_cached", f"{el['image_url']} of page {el['page_id']} is not in the images input")
                image_jobs.append((el, "image", sha, LLMRequest(el["element_id"], IMAGE_PROMPT, {"question": question, "stand_in": False}, images=[sha])))
            else:
                context = surrounding_text(chunk.get(el["page_id"], ""), p["placeholder"].format(n=el["placeholder"]), p["context_chars"])
                variables = {"question": question, "stand_in": True, "alt": el["text"], "context": context}
                image_jobs.append((el, "text_stand_in", "", LLMRequest(el["element_id"], IMAGE_PROMPT, variables)))

    writer = ctx.writer("scored_elements")
    batches = [(text_llm, [(el, "text", "", req) for el, req in text_jobs], "score text")]
    batches.append((image_llm, image_jobs, "score images"))
    for llm, jobs, desc in batches:
        if not jobs:
            continue
        with LLMClient.from_params(llm, stats=ctx.stats) as client:
            answers = client.run([job[-1] for job in jobs], desc=desc)
        for (el, mode, sha, request), answer in zip(jobs, answers):
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
        "images": Input("images_cached rows (owner_id = page id, url, sha256) for scoring images as images", many=True, optional=True, table="images_cached"),
    },
    outputs={"scored_elements": Output("m2rag_scored_elements", "the elements with their 0-10 scores")},
    params={
        "llm": Param(dict, {}, "the text scorer (figure 8; M2RAG: DeepSeek-Chat): the config llm: section, per-stage overrides merged in", schema="llm"),
        "vision_llm": Param(dict, {}, "the image scorer (figure 9; M2RAG: MiniCPM-V-2.6): keys replacing those of llm", schema="llm"),
        "vision": Param(bool, None, "show the image itself; null = what the image scorer's backend takes (llamacpp: no, text stand-in)"),
        "placeholder": Param(str, "<image_{n}>", "split_pages' image placeholder, to find an image's surrounding text"),
        "context_chars": Param(int, 300, "surrounding text shown either side of an image's placeholder (text stand-in)", min=0),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
