"""The judge of the MAVIS evaluation (mavis.txt §4.1-4.2, App. B.1, Tables 12-14): every answer is
split into statements with their citations and judged for completeness, relevance and support,
once as the paper describes it (strict) and once as MAVIS's public scripts do it (reference).

strict (rows with scoring "strict"; sentences with statement_set "strict"):
- Sentences (§4.2 "pair each sentence with its cited documents"): blingfire sentences of the scored
  answer (<thinking> already removed); a sentence made only of markers joins the one before;
  citations "[k]" parsed by stages.eval_mavis.mavis_eval.parse_citations (numbers outside 1..n kept apart
  as `unknown`, duplicates once, every number as written in `written`). Judges read the sentence
  without its markers (`statement`).
- Completeness (Table 13): one call per gold fact of the instance, with the whole answer (markers removed).
- Relevance (Table 14): one call per sentence, with the question and its image(s).
- Support (Table 12): per sentence with citations, one call with all its cited documents together
  (recall), and one per cited document alone (precision); a sentence with one citation asks the
  same call once.
reference (rows with scoring "reference"), on `reference_answer` (the raw output after its last
"</thinking>" and "answer is:"):
- statements as the public code extracts them (stages.eval_mavis.mavis_eval.reference_statements):
  statement_set "reference_grounding" (groundedness.py) and "reference_relevance" (relevance.py);
  citations as groundedness.py reads them (`reference_citations`: duplicates kept, numbers past
  n dropped, " 0" the last document), kept in `cited` with duplicates;
- completeness per fact with the answer as the public code shows it (citations kept);
- relevance per relevance statement with the question and the gold answer, no image
  (prompts/mavis_eval_relevance_answer.md);
- support per grounding statement with a cited document: all cited documents together, without
  the question (as groundedness.py); with two or more citations also each citation alone
  (`citation` = its position, duplicates are separate calls).
Identical calls of the two scorings are asked once (the client's cache). Documents are the
originals (also for +KE answers); an image document goes to a judge that sees images as an image,
else as its text stand-in (rows record `doc_modality` and the judge's `vision`). Labels fully /
partially / not become 1 / 0.5 / 0. A failed judge call (invalid after retries) is a row with ok
false and no score (strict: missing; reference: 0, as the public "Error" label). An answer with
nothing to judge (empty, or a failed generation) asks no completeness call: its facts get "not
addressed" rows without a call (raw says so).

Inputs: responses (mavis_eval_responses), release.
Outputs: judgements (mavis_eval_judgements), sentences (mavis_eval_sentences); neither counted.
Rejects: bad_documents (a response whose documents are not numbered 1..n in the order shown: its
citations name no document it can be judged against); failed calls are rows, not rejects.
Invariant: responses in = responses judged + rejected.
Params: judge, llm, vision, max_tokens, max_image_side.
"""
from __future__ import annotations

from stages.core.ids import content_id
from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.eval_mavis.mavis_eval import (label_score, load_release, model_image, parse_citations, question_images, reference_answer,
                                    reference_citations, reference_statements, release_folder, split_sentences, strip_citations)
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "3"  # 3: documents not numbered 1..n are a reject (bad_documents), not a KeyError
PROMPTS = {"completeness": "mavis_eval_completeness", "relevance": "mavis_eval_relevance", "support": "mavis_eval_support",
           "relevance_answer": "mavis_eval_relevance_answer"}
EMPTY = "(empty answer: not sent to the judge)"
FAILED = "(failed generation: not sent to the judge)"


def _sentence_row(response: dict, statement_set: str, index: int, sentence: str, statement: str, cited, unknown, written) -> dict:
    return {"id": content_id("msent", response["id"], statement_set, index), "response_id": response["id"], "model": response["model"],
            "instance_id": response["instance_id"], "setting": response["setting"], "method": response["method"],
            "statement_set": statement_set, "sentence_index": index, "sentence": sentence, "statement": statement,
            "cited": cited, "unknown": unknown, "written": written}


def sentence_rows(response: dict) -> list[dict]:
    """The strict sentences, then the reference statements of both sets."""
    n = len(response["documents"])
    rows = []
    for index, sentence in enumerate(split_sentences(response["answer"])):
        cited, unknown, written = parse_citations(sentence, n)
        rows.append(_sentence_row(response, "strict", index, sentence, strip_citations(sentence), cited, unknown, written))
    answer = reference_answer(response["raw"], response.get("error"))
    for statement_set, variant in (("reference_grounding", "grounding"), ("reference_relevance", "relevance")):
        for index, (statement, refs) in enumerate(reference_statements(answer, variant)):
            cited, dropped, read = reference_citations(refs, n)
            rows.append(_sentence_row(response, statement_set, index, f"{statement} {refs}".strip(), statement, cited, dropped, read))
    return rows


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    release = load_release(folder)
    images_of = question_images(release["images"])
    facts: dict[str, list[dict]] = {}
    for fact in sorted(release["facts"], key=lambda f: f["fact_id"]):
        facts.setdefault(fact["instance_id"], []).append(fact)
    instances = {r["id"]: r for r in release["instances"]}
    image_rows = {r["sha256"]: r for r in release["images"]}
    vision = sees_images(params)
    sampling = {"max_tokens": params["max_tokens"]} if params["max_tokens"] else None
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        store = ImageStore(client.settings["image_store"])

        def doc_view(doc: dict) -> tuple[dict, list[str]]:
            if doc["modality"] == "image" and vision:
                try:
                    sha = model_image(store, folder, image_rows.get(doc["image_sha256"]) or {"path": f"images/{doc['image_sha256']}.jpg"},
                                      params["max_image_side"])
                except Reject as missing:
                    raise StageError(f"document {doc['doc_id']}: {missing.detail}") from None
                return {"number": doc["number"], "modality": "image", "text": None, "image": True}, [sha]
            return {"number": doc["number"], "modality": doc["modality"], "text": doc["text"], "image": False}, []

        def support_request(rid: str, statement: str, question: str, cited: list[dict]) -> LLMRequest:
            views, images = [], []
            for doc in cited:
                view, attached = doc_view(doc)
                images += attached
                view["image_number"] = len(images) if attached else None
                views.append(view)
            return LLMRequest(id=rid, prompt=PROMPTS["support"], images=images, sampling=sampling,
                              variables={"statement": statement, "question": question, "documents": views})

        keys, requests, uncalled = [], [], []

        def ask(key: dict, request: LLMRequest) -> None:
            keys.append(key)
            requests.append(request)

        for response in ctx.read_rows("responses"):
            numbers = [d["number"] for d in response["documents"]]
            if numbers != list(range(1, len(numbers) + 1)):  # citations [k] are read as the k-th document shown
                with ctx.item(response["id"]):
                    raise Reject("bad_documents", f"documents numbered {numbers[:20]}, not 1..{len(numbers)} in the order shown")
                continue
            ctx.add_input()
            ctx.stats["responses_judged"] += 1
            sentences = sentence_rows(response)
            ctx.write("sentences", sentences)
            instance = instances.get(response["instance_id"])
            if instance is None:
                raise StageError(f"response {response['id']}: instance {response['instance_id']} is not in the release {folder}")
            base = {"response_id": response["id"], "model": response["model"], "judge": params["judge"],
                    "instance_id": response["instance_id"], "setting": response["setting"], "method": response["method"],
                    "sentence_index": None, "fact_id": None, "doc_number": None, "citation": None, "doc_modality": None, "vision": vision}
            failed_generation = bool(response.get("error"))
            ctx.stats["failed_generations"] += failed_generation
            docs = {d["number"]: d for d in response["documents"]}
            by_set = {name: [s for s in sentences if s["statement_set"] == name] for name in ("strict", "reference_grounding", "reference_relevance")}
            reference = reference_answer(response["raw"], response.get("error"))
            q_images = None
            for scoring, text in (("strict", strip_citations(response["answer"])), ("reference", reference)):
                key = {**base, "scoring": scoring, "kind": "completeness"}
                nothing = not by_set["strict"] if scoring == "strict" else failed_generation or not reference
                for fact in facts.get(response["instance_id"], []):  # Table 13
                    if nothing:  # nothing written (or a failed generation): every fact is not addressed, without a call
                        uncalled.append({**key, "fact_id": fact["fact_id"], "label": "Not addressed", "score": 0.0, "ok": True,
                                         "error": None, "raw": FAILED if failed_generation else EMPTY})
                    else:
                        ask({**key, "fact_id": fact["fact_id"]}, LLMRequest(id=fact["fact_id"], prompt=PROMPTS["completeness"],
                                                                           sampling=sampling, variables={"fact": fact["text"], "response": text}))
            ctx.stats["empty_answers"] += not by_set["strict"]
            for s in by_set["strict"]:
                i = s["sentence_index"]
                if q_images is None:
                    q_images = [model_image(store, folder, r, params["max_image_side"])
                                for r in images_of(instance)] if vision else []
                ask({**base, "scoring": "strict", "kind": "relevance", "sentence_index": i},
                    LLMRequest(id=s["id"], prompt=PROMPTS["relevance"], images=q_images, sampling=sampling,
                               variables={"question": response["question"], "statement": s["statement"],
                                          "question_images": len(q_images), "vision": vision}))
                if not s["cited"]:
                    continue
                ask({**base, "scoring": "strict", "kind": "support", "sentence_index": i},
                    support_request(s["id"], s["statement"], response["question"], [docs[n] for n in s["cited"]]))
                for n in s["cited"]:
                    ask({**base, "scoring": "strict", "kind": "support_doc", "sentence_index": i, "doc_number": n, "doc_modality": docs[n]["modality"]},
                        support_request(f"{s['id']}#{n}", s["statement"], response["question"], [docs[n]]))
            for s in by_set["reference_relevance"]:
                ask({**base, "scoring": "reference", "kind": "relevance", "sentence_index": s["sentence_index"]},
                    LLMRequest(id=s["id"], prompt=PROMPTS["relevance_answer"], sampling=sampling,
                               variables={"question": response["question"], "answer": response["gold_answer"], "statement": s["statement"]}))
            for s in by_set["reference_grounding"]:
                i, cited = s["sentence_index"], s["cited"]
                if not cited:
                    continue
                ask({**base, "scoring": "reference", "kind": "support", "sentence_index": i},
                    support_request(s["id"], s["statement"], "", [docs[n] for n in cited]))
                for j, n in enumerate(cited if len(cited) > 1 else []):
                    ask({**base, "scoring": "reference", "kind": "support_doc", "sentence_index": i, "doc_number": n, "citation": j,
                         "doc_modality": docs[n]["modality"]}, support_request(f"{s['id']}#{j}", s["statement"], "", [docs[n]]))
        answers = client.run(requests, desc=f"judge {params['judge']}")
        rows = []
        for key, answer in zip(keys, answers):
            label = answer.value["label"] if answer.ok else None
            ctx.stats["failed_judge_calls"] += not answer.ok
            rows.append({**key, "label": label, "score": label_score(label) if label else None, "ok": answer.ok,
                         "error": answer.error, "raw": answer.raw})
        for row in rows + uncalled:
            row["id"] = content_id("mj", row["response_id"], row["scoring"], row["kind"], row["sentence_index"], row["fact_id"],
                                   row["doc_number"], row["citation"])
        ctx.write("judgements", rows + uncalled)


def _invariant(ctx) -> str | None:
    judged = ctx.stats["responses_judged"]
    return None if judged + ctx.rejected == ctx.rows_in else f"responses in {ctx.rows_in} != judged {judged} + rejected {ctx.rejected}"


STAGE = Stage(
    name="mavis_judge",
    version=VERSION,
    doc=__doc__,
    inputs={
        "responses": Input("mavis_eval_responses from mavis_generate_answers", table="mavis_eval_responses"),
        "release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb", kind="file"),
    },
    outputs={
        "judgements": Output("mavis_eval_judgements", "one row per judge call (failed calls: ok false, no score)", counted=False),
        "sentences": Output("mavis_eval_sentences", "one row per answer sentence with its citations", counted=False),
    },
    params={
        "judge": Param(str, help="the judge's name, recorded in every row", pattern=r"^[A-Za-z0-9_.-]+$"),
        "llm": Param(dict, {}, "llm settings of the judge (the llm: section with the judge's overrides)", schema="llm"),
        "vision": Param(bool, None, "show images to the judge; null = what the backend takes (llamacpp: no, text stand-ins)"),
        "max_tokens": Param(int, 256, "judge answer budget in tokens (0 = the prompts' default)", min=0),
        "max_image_side": Param(int, 512, "longer side of images sent to the judge, in pixels", min=32),
    },
    run=run,
    invariant=_invariant,
    prompts=("mavis_eval_completeness", "mavis_eval_relevance", "mavis_eval_relevance_answer", "mavis_eval_support"),
    rejects={"bad_documents": "a response whose documents are not numbered 1..n in the order shown (its citations could not be read)"},  # failed calls are rows
)

if __name__ == "__main__":
    STAGE.main()
