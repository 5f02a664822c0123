"""MCiteBench evaluation responses as CiteEval-Auto input (citeeval_responses): the query, the items
the candidate was shown as numbered passages, and its response with `[k]` citations (citeeval.txt
§2.1: statements cite passages by id; CiteEval reads text only).

- Text items keep their number: the item the model saw as "[7]" is passage 7, and its "[7]"
  citations stay as written.
- Figures and tables become passages numbered after every text number of the question and every
  `[k]` the response writes (so no id is shared). Their text is the caption (`mode` caption) or,
  when the release has none, the label alone as a stand-in (`mode` label); the title is the label
  ("Figure 3"). CiteEval's judge never sees an image.
- Citations: "[1, 2]" / "[1; 2]" become "[1][2]" (CiteEval's form); a figure or table reference
  that names a shown item ("Figure 3", "Fig. 3a", "Tables 2 and 4", read by the shared reference
  parser) keeps its words and gains the item's marker after them ("Figure 3 [9] shows…"), so the
  statement text is unchanged once markers are removed. References to items that were not shown
  get no marker (counted in `refs_not_in_input`).
- The row's `mode`: text (all passages text), caption, label, or caption+label.

Inputs: responses (eval_responses of one model). Outputs: responses (citeeval_responses).
Rejects: no_items (a response without shown items).
"""
from __future__ import annotations

from stages.citeeval.citeeval import CITATION, row_mode, split_lists
from stages.core.refs import figure_table_refs
from stages.core.stage import Input, Output, Reject, Stage

VERSION = "1"


def _text_number(label: str) -> int | None:
    found = CITATION.fullmatch(label)
    return int(found.group(1)) if found else None


def passages_of(items: list[dict], response: str) -> tuple[list[dict], dict[str, int]]:
    """Passages in the order shown, and figure/table label -> passage id."""
    taken = {n for n in (_text_number(i["label"]) for i in items) if n is not None}
    taken |= {int(k) for k in CITATION.findall(response)}
    next_id = max(taken, default=0) + 1
    passages, image_ids = [], {}
    for item in items:
        number = _text_number(item["label"])
        if number is not None:
            passages.append({"id": number, "title": "", "text": item["text"] or "", "mode": "text"})
            continue
        image_ids[item["label"]] = next_id
        caption = (item["caption"] or "").strip()
        text = caption if caption else f"{item['label']} (an image; no caption is available)"
        passages.append({"id": next_id, "title": item["label"], "text": text, "mode": "caption" if caption else "label"})
        next_id += 1
    return passages, image_ids


def mark_figures(text: str, image_ids: dict[str, int]) -> tuple[str, int]:
    """The response with a marker after each figure/table reference to a shown item, and how many
    references named no shown item."""
    by_span: dict[tuple[int, int], list[str]] = {}
    for ref in figure_table_refs(text):
        by_span.setdefault(ref.span, []).append(ref.label)
    missing, out, last = 0, [], 0
    for (start, end), labels in sorted(by_span.items()):
        ids = [image_ids[label] for label in dict.fromkeys(labels) if label in image_ids]
        missing += sum(1 for label in dict.fromkeys(labels) if label not in image_ids)
        out.append(text[last:end] + (" " + "".join(f"[{i}]" for i in ids) if ids else ""))
        last = end
    out.append(text[last:])
    return "".join(out), missing


def run(ctx):
    for response in ctx.read_rows("responses"):
        with ctx.item(response["id"]):
            if not response["items"]:
                raise Reject("no_items", "the response's question showed no items")
            text = split_lists(response["response"] or "")
            passages, image_ids = passages_of(response["items"], text)
            text, missing = mark_figures(text, image_ids)
            ctx.stats["refs_not_in_input"] += missing
            ctx.stats[f"passages_{row_mode(passages)}"] += 1
            ctx.write("responses", [{
                "response_id": response["id"], "model": response["model"], "source": "mcitebench",
                "query": response["question"], "passages": passages, "response": text, "mode": row_mode(passages),
            }])


STAGE = Stage(
    name="citeeval_from_mcitebench",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("eval_responses of one model (generate_answers)", table="eval_responses")},
    outputs={"responses": Output("citeeval_responses", "the responses as CiteEval-Auto input")},
    params={},
    run=run,
    rejects={"no_items": "the response's question showed no items"},
)

if __name__ == "__main__":
    STAGE.main()
