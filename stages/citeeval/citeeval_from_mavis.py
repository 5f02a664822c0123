"""MAVIS evaluation responses as CiteEval-Auto input (citeeval_responses): the question, the
documents the candidate was shown as numbered passages, and its answer with `[k]` citations
(mavis.txt §3.1 step 3, Tables 16-18; citeeval.txt §2.1: statements cite passages by id; CiteEval
reads text only).

- Passages keep the numbers the model saw: document k of the response's list is passage k, so its
  "[k]" citations stay as written. A text document is its text (`mode` text). An image document is
  its text stand-in, the image search result's title and snippet that the release keeps as the
  document's text (`mode` stand_in; CiteEval's judge never sees an image), or, without one, its
  document id as a label (`mode` label). With +KE (Table 18) the model saw each document's
  extracted facts: the passage is that extraction (`mode` extraction).
- The response is the model's output as written (`raw`: CoT's <thinking> block included, which
  citeeval_prepare drops), with "[1, 2]" / "[1; 2]" made "[1][2]" (CiteEval's form).
- The row's `model` is the CiteEval report's row: the model with the RAG setting and the method
  that wrote the answer, "<model> [<setting>, <method>]" (Tables 4-5 compare those), and the release
  split when it is not the test split (human-annotated, the paper's numbers), "<model> [<setting>,
  <method>, train]", so the splits never share a row.
- The row's `mode`: text (all passages text), else the stand-ins used, joined by "+".

Inputs: responses (mavis_eval_responses of one model). Outputs: responses (citeeval_responses).
Rejects: no_documents (a response whose answer was written from no document: nothing to cite).
Invariant: responses in = rows out + rejected.
"""
from __future__ import annotations

from stages.citeeval.citeeval import row_mode, split_lists
from stages.core.stage import Input, Output, Reject, Stage

VERSION = "1"


def passage(document: dict, knowledge_extraction: bool) -> dict:
    number = document["number"]
    if knowledge_extraction:
        return {"id": number, "title": "", "text": document["extraction"] or "", "mode": "extraction"}
    if document["modality"] == "text":
        return {"id": number, "title": "", "text": document["text"] or "", "mode": "text"}
    stand_in = (document["text"] or "").strip()
    if stand_in:
        return {"id": number, "title": "image", "text": stand_in, "mode": "stand_in"}
    return {"id": number, "title": "image", "text": f"image document {document['doc_id']} (no text stand-in)", "mode": "label"}


def run(ctx):
    for response in ctx.read_rows("responses"):
        with ctx.item(response["id"]):
            if not response["documents"]:
                raise Reject("no_documents", "the answer was written from no retrieved document")
            passages = [passage(d, response["method"].endswith("_ke")) for d in sorted(response["documents"], key=lambda d: d["number"])]
            mode = row_mode(passages)
            ctx.stats[f"passages_{mode}"] += 1
            ctx.stats[f"split_{response['split']}"] += 1
            config = [response["setting"], response["method"]] + ([response["split"]] if response["split"] != "test" else [])
            model = f"{response['model']} [{', '.join(config)}]"
            ctx.write("responses", [{
                "response_id": response["id"], "model": model, "source": "mavis", "query": response["question"],
                "passages": passages, "response": split_lists(response["raw"] or ""), "mode": mode,
            }])


STAGE = Stage(
    name="citeeval_from_mavis",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("mavis_eval_responses of one model (mavis_generate_answers)", table="mavis_eval_responses")},
    outputs={"responses": Output("citeeval_responses", "the responses as CiteEval-Auto input")},
    params={},
    rejects={
        "no_documents": "the answer was written from no retrieved document",
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
