"""The entailment filter shared by MAVIS's text and image stages (App. A.3): "we treat the document
as the premise and the statement as the hypothesis". The pairs of one modality are read from
retrieve_fact_documents' tables, each asked once (a yes/no prompt, scored as P(yes) by the model
layer), and written as scores; the decision (a threshold per modality) is decide_entailment's,
downstream, so changing it never re-asks a model."""
from __future__ import annotations

from stages.core.llm import LLMClient, LLMRequest
from stages.core.stage import Reject


# The reasons pairs_of and score reject with (per pair `<fact_id>|<doc_id>`).
ENTAILMENT_REJECTS = {
    "unknown_fact": "the pair names a fact that is not in the facts input",
    "unknown_document": "the pair names a document that is not in the documents input",
    "invalid_answer": "the entailment answer was not yes/no after the client's retries (raw text in the detail)",
}


def pairs_of(ctx, modality: str) -> list[tuple[dict, dict, dict]]:
    """(fact_documents row, fact, document) for every pair whose document has `modality`; a pair
    naming an unknown fact or document is a reject (`unknown_fact`, `unknown_document`). Every
    pair of the modality is counted as an input item."""
    facts = {f["fact_id"]: f for f in ctx.read_rows("facts")}
    documents = {d["doc_id"]: d for d in ctx.read_rows("documents")}
    out = []
    for pair in ctx.read_rows("fact_documents"):
        doc = documents.get(pair["doc_id"])
        if doc is not None and doc["modality"] != modality:
            continue
        with ctx.item(pair_id(pair)):
            if doc is None:
                raise Reject("unknown_document", f"{pair['doc_id']} is not in documents")
            if pair["fact_id"] not in facts:
                raise Reject("unknown_fact", f"{pair['fact_id']} is not in facts")
            out.append((pair, facts[pair["fact_id"]], doc))
    return out


def pair_id(pair: dict) -> str:
    return f"{pair['fact_id']}|{pair['doc_id']}"


def score(ctx, llm_params: dict, requests: list[LLMRequest], items: list[tuple[dict, dict, dict]], modes: list[str],
          desc: str) -> None:
    """Ask every request, write one score row per valid answer; an answer that stays invalid after
    the client's retries is an `invalid_answer` reject with its raw text."""
    with LLMClient.from_params(llm_params, stats=ctx.stats) as llm:
        answers = llm.run(requests, desc=desc)
        model = llm.model_id
    rows = []
    for (pair, _, doc), mode, answer in zip(items, modes, answers):
        with ctx.item(pair_id(pair), counted=False):
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            p_yes = answer.p_yes if answer.p_yes is not None else float(answer.value == "yes")
            rows.append({"fact_id": pair["fact_id"], "doc_id": doc["doc_id"], "modality": doc["modality"],
                         "score": float(p_yes), "mode": mode, "model": model})
    ctx.write("scores", rows)
