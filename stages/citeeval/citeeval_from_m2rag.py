"""M2RAG evaluation responses as CiteEval-Auto input (citeeval_responses): the query, the web page
material the candidate was given as numbered passages, and its answer with the images it placed as
its citations (m2rag.txt §3, §5, App. E; citeeval.txt §2.1: statements cite passages by id;
CiteEval reads text only).

An M2RAG answer cites in one way only: it places input images, `![caption](image_n)`, where they
support the text (§3 "Multi-modal Element Incorporation"). Rated by CiteEval:

- Passages: each page's selected text pieces (the response's `contexts`, as the model read them)
  are passages 1..P in page order, titled with the page title (`mode` text); each input image n is
  passage P + n, titled "Image n", given as its caption (`mode` caption) or, without one, as its
  number (`mode` label). CiteEval's judge never sees an image.
- The response: each placeholder that names an input image (the generation stage's
  `output_images`) becomes that image's marker "[P + n]" on its own line, which citeeval_prepare
  gives to the sentence before it (a citation that opens a sentence belongs to the one before);
  a placeholder naming no input image (`unresolved`) is removed (counted). Statements carry no
  page citation: the model was not asked for any, so CiteEval's Full scenario counts the
  statements drawn from the pages as missing their citation, and the Cited scenario rates the
  sentences an image illustrates.
- The row's `model` is the CiteEval report's row: "<model> [<approach>]" (single_stage,
  multi_stage, separate are three systems, §5).
- The row's `mode`: text, or the image stand-ins used (caption, label, caption+label).

Inputs: responses (m2rag_responses of one model). Outputs: responses (citeeval_responses).
Rejects: no_inputs (a response given neither page text nor an image: nothing to cite), bad_response
(an output image names no input image, or two input images share a number: as m2rag_judge).
Invariant: responses in = rows out + rejected.
"""
from __future__ import annotations

from stages.citeeval.citeeval import row_mode
from stages.core.stage import Input, Output, Reject, Stage

VERSION = "1"


def passages_of(response: dict) -> tuple[list[dict], dict[int, int]]:
    """Passages (pages, then images), and input image n -> passage id."""
    pages = sorted(response["contexts"] or [], key=lambda c: c["page_rank"])
    passages = [{"id": i, "title": c["title"] or "", "text": c["text"] or "", "mode": "text"} for i, c in enumerate(pages, 1)]
    image_ids = {}
    for image in sorted(response["inputs"] or [], key=lambda i: i["n"]):
        image_ids[image["n"]] = len(pages) + image["n"]
        caption = (image["caption"] or "").strip()
        passages.append({"id": image_ids[image["n"]], "title": f"Image {image['n']}",
                         "text": caption or f"Image {image['n']} (no caption is available)", "mode": "caption" if caption else "label"})
    return passages, image_ids


def cite_images(response: dict, image_ids: dict[int, int]) -> str:
    """The answer with each resolved placeholder replaced by its passage marker on its own line and
    each unresolved one removed."""
    text, out, last = response["response"] or "", [], 0
    for image in sorted(response["output_images"] or [], key=lambda i: i["start"]):
        out += [text[last: image["start"]], f"\n[{image_ids[image['n']]}]\n"]
        last = image["end"]
    out.append(text[last:])
    cited = "".join(out)
    for placeholder in response["unresolved"] or []:
        cited = cited.replace(placeholder, "")
    return cited


def run(ctx):
    for response in ctx.read_rows("responses"):
        with ctx.item(response["id"]):
            inputs = [i["n"] for i in response["inputs"]]
            unknown = sorted({o["n"] for o in response["output_images"]} - set(inputs))
            if unknown or len(set(inputs)) < len(inputs):
                raise Reject("bad_response", f"output images {unknown} name no input image" if unknown else f"input images numbered twice: {inputs}")
            passages, image_ids = passages_of(response)
            if not passages:
                raise Reject("no_inputs", "the response was given no page text and no image")
            ctx.stats["image_citations"] += len(response["output_images"] or [])
            ctx.stats["unresolved_placeholders"] += len(response["unresolved"] or [])
            ctx.stats[f"passages_{row_mode(passages)}"] += 1
            ctx.write("responses", [{
                "response_id": response["id"], "model": f"{response['model']} [{response['approach']}]", "source": "m2rag", "query": response["query"],
                "passages": passages, "response": cite_images(response, image_ids), "mode": row_mode(passages),
            }])


STAGE = Stage(
    name="citeeval_from_m2rag",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("m2rag_responses of one model (m2rag_generate)", table="m2rag_responses")},
    outputs={"responses": Output("citeeval_responses", "the responses as CiteEval-Auto input")},
    params={},
    rejects={
        "no_inputs": "the response was given no page text and no image",
        "bad_response": "the response's output images name no input image, or two input images share a number",
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
