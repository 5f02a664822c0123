"""Split responses into sentences with their citations (mcitebench.txt §3.1 and §4 "sentence-citation
pairs"; §5.1 citation forms). The seed asks GPT-4o to do this; we do it with a deterministic parser,
so a score never depends on a model's reading of the citations.

Sentences: each non-empty line is split with blingfire; a "sentence" made only of citation markers
("[2].") belongs to the sentence before it.
Citations, normalised to the labels the input items carry, all read by the shared reference
grammar (stages.core.refs.citation_refs):
- text items: "[1]", "[1][2]", "[1, 2]", "[1; 2]", "[1-3]", "[1 and 2]", "[1 to 3]", "[**1**]" ->
  "[1]", "[2]", "[3]"; a bracket may mix indices and figures or tables ("[1, Figure 2]");
- figures and tables: "Figure 3", "Fig. 3", "Figures 2 and 3", "Figures 2 to 4", "Table 2",
  "Tab. 2", "Tab 2", "Tables 2/3"; sub-figures fold ("Figure 3a" -> Figure 3); a count or a
  measurement after a comma is not a reference ("In Figure 1, 3 of the 5 runs").
Sections, lines and appendices are not input items and are not citations here.
Duplicates within a sentence count once (`citations`); `citations_as_written` keeps every
occurrence in text order ("[1][1][3]" -> [1], [1], [3]), as MCiteBench's extraction does, for the
reference scoring mode. Citations of items that are not among the response's input items are kept
(listed in `unknown`) and scored as wrong downstream, never dropped.

Inputs: responses (eval_responses).
Outputs: citations (eval_citations, one row per response: the response-level citation set),
sentences (eval_sentences, one row per sentence, not counted).
Params: none.
"""
from __future__ import annotations

import re


from stages.core.ids import content_id
from stages.core.refs import citation_brackets, citation_refs
from stages.core.sentences import answer_sentences
from stages.core.stage import Input, Output, Stage

VERSION = "3"

CITED_KINDS = ("index", "figure", "table")
_LEFTOVER = re.compile(r"^[\s.!?*]*$")


def citations_as_written(sentence: str) -> list[str]:
    """Every citation label of one sentence in text order, repeats kept: "[k]", "Figure N", "Table N"."""
    return [ref.label for ref in citation_refs(sentence) if ref.kind in CITED_KINDS]


def citations_in(sentence: str) -> list[str]:
    """Distinct citation labels of one sentence in text order."""
    return list(dict.fromkeys(citations_as_written(sentence)))


def only_markers(sentence: str) -> bool:
    """A "sentence" made only of citation brackets ("[2].", "[1][3]")."""
    brackets = citation_brackets(sentence)
    rest, end = [], 0
    for (start, stop), _ in brackets:
        rest.append(sentence[end:start])
        end = stop
    rest.append(sentence[end:])
    return bool(brackets) and bool(_LEFTOVER.match("".join(rest)))


def split_sentences(text: str) -> list[str]:
    return answer_sentences(text, only_markers)


def parse_response(response: dict) -> tuple[dict, list[dict]]:
    """The response-level citation row and the sentence rows of one eval_responses row."""
    known = {item["label"] for item in response["items"]}
    rows, everything = [], []
    for index, sentence in enumerate(split_sentences(response["response"])):
        written = citations_as_written(sentence)
        cites = list(dict.fromkeys(written))
        everything += cites
        rows.append({
            "id": content_id("sent", response["id"], index),
            "response_id": response["id"],
            "model": response["model"],
            "question_id": response["question_id"],
            "sentence_index": index,
            "sentence": sentence,
            "citations": cites,
            "citations_as_written": written,
            "unknown": [c for c in cites if c not in known],
        })
    distinct = list(dict.fromkeys(everything))
    parsed = {
        "id": response["id"],
        "model": response["model"],
        "question_id": response["question_id"],
        "n_sentences": len(rows),
        "n_cited_sentences": sum(1 for r in rows if r["citations"]),
        "citations": distinct,
        "unknown": [c for c in distinct if c not in known],
    }
    return parsed, rows


def run(ctx):
    for response in ctx.read_rows("responses"):
        ctx.add_input()
        parsed, sentences = parse_response(response)
        ctx.stats["sentences"] += parsed["n_sentences"]
        ctx.stats["cited_sentences"] += parsed["n_cited_sentences"]
        ctx.stats["citations_not_in_input"] += len(parsed["unknown"])
        ctx.stats["responses_without_citations"] += not parsed["citations"]
        ctx.write("citations", [parsed])
        ctx.write("sentences", sentences)


STAGE = Stage(
    name="split_citations",
    version=VERSION,
    doc=__doc__,
    inputs={"responses": Input("eval_responses from generate_answers", table="eval_responses")},
    outputs={
        "citations": Output("eval_citations", "one row per response"),
        "sentences": Output("eval_sentences", "one row per sentence", counted=False),
    },
    params={},
    run=run,
    rejects={},
)

if __name__ == "__main__":
    STAGE.main()
