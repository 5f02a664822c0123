"""Answer generation with citations (mavis.txt §3.1 step 3, §5.2, App. C.1-C.2 Tables 16-18).

For each (instance, setting) the retrieved documents of all queries, in (query, rank) order with
repeats once, are numbered 1..n and shown with the question and its images; the model answers with
inline citations "[k]". Methods:
- `vanilla` (Table 16): answer in paragraph form, a citation at the end of every sentence;
- `cot` (Table 17): <thinking> (relevant documents, what they say) before the answer;
- `vanilla_ke`, `cot_ke` (Table 18 first, §5.2): the model extracts the facts of each document
  alone, without the question or image; the answer is then written from the numbered extractions
  (the same numbers), while groundedness is still judged against the original documents.
A <thinking> block is removed from every method's answer before scoring (`answer`; the seed's
generation strips it whatever the method), the raw output kept (`raw`). Sampling as App. C.1:
temperature 0.7, top-p 0.95, seeded (the llm section's seed), max tokens a param. A text-only model (`vision` false) reads an image document through its text stand-in and
is told it does not see the question image; a vision model gets the images, longer side scaled
to `max_image_side` pixels. One response per (instance, setting, method).

A failed generation is a response, not a reject: the answer call failed (invalid or empty after
the retries, a backend error) or, for +KE, a Table 18 call failed for one of its documents. Its
`error` says why, `answer` is empty and `raw` keeps what came back; the scores count it as the
paper would (strict: an empty answer, 0 everywhere; reference: the public code's "Error" answer,
see stages.eval_mavis.mavis_eval.reference_scores). Each response also records how many of the
instance's gold documents (entailed in `fact_documents`) are text and image: the public MAUVE
keeps instances with both.

Inputs: retrieved (mavis_eval_retrieved), release.
Outputs: responses (mavis_eval_responses).
Rejects (per response): missing_image (a question image of the release is not in its folder).
Params: model, llm, vision, methods, temperature, top_p, max_tokens, extract_max_tokens, max_image_side.
"""
from __future__ import annotations

import collections

from stages.core.ids import content_id
from stages.core.images import ImageStore, is_sha256
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.eval_mavis.mavis_eval import METHODS, MODEL_IMAGE_REJECTS, load_release, model_image, positives, question_images, release_folder, remove_thinking
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "2"
PROMPTS = {"vanilla": "mavis_eval_vanilla", "cot": "mavis_eval_cot"}
EXTRACT = "mavis_eval_extract"


def numbered_documents(rows: list[dict], docs: dict[str, dict]) -> list[dict]:
    """The retrieved documents of one (instance, setting), numbered from 1 in (query, rank) order, repeats once."""
    out: list[dict] = []
    seen = set()
    for row in sorted(rows, key=lambda r: (r["query_index"], r["rank"])):
        if row["doc_id"] in seen:
            continue
        seen.add(row["doc_id"])
        doc = docs.get(row["doc_id"])
        if doc is None:  # retrieved from another release: nothing here to show the model
            raise StageError(f"retrieved: document {row['doc_id']} (instance {row['instance_id']}) is not in the release")
        sha = doc.get("image_sha256")  # a release folder is read without a contract: a value not in hex names no image
        out.append({"number": len(out) + 1, "doc_id": doc["doc_id"], "modality": doc["modality"], "text": doc["text"] or "",
                    "image_sha256": sha if is_sha256(sha) else None, "extraction": None})
    return out


def shown(documents: list[dict], vision: bool, image_of, use_extractions: bool) -> tuple[list[dict], list[str]]:
    """Template views of the documents and the images to attach (<image k> = images[k-1])."""
    views, images = [], []
    for doc in documents:
        view = {"number": doc["number"], "modality": doc["modality"], "text": doc["text"], "image_number": None}
        if use_extractions:
            view.update(modality="text", text=doc["extraction"])
        elif doc["modality"] == "image" and vision:
            images.append(image_of(doc))
            view["image_number"] = len(images)
        views.append(view)
    return views, images


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    release = load_release(folder)
    images_of = question_images(release["images"])
    docs = {d["doc_id"]: d for d in release["documents"]}
    image_rows = {r["sha256"]: r for r in release["images"]}
    instances = {r["id"]: r for r in release["instances"]}
    gold = positives(release)
    vision = sees_images(params)
    groups: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)
    for row in ctx.read_rows("retrieved"):
        groups[(row["instance_id"], row["setting"])].append(row)
    sampling = {"temperature": params["temperature"], "top_p": params["top_p"], **({"max_tokens": params["max_tokens"]} if params["max_tokens"] else {})}
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        store = ImageStore(client.settings["image_store"])

        def image_of(doc: dict) -> str:
            row = image_rows.get(doc["image_sha256"]) or {"path": f"images/{doc['image_sha256']}.jpg"}
            return model_image(store, folder, row, params["max_image_side"])

        tasks = []  # (row, documents, question images)
        for (instance_id, setting), rows in sorted(groups.items()):
            instance = instances.get(instance_id)
            if instance is None:
                raise StageError(f"retrieved: instance {instance_id} is not in the release {folder}")
            for method in params["methods"]:
                row = {"id": content_id("mresp", params["model"], instance_id, setting, method), "model": params["model"],
                       "instance_id": instance_id, "split": instance["split"], "setting": setting, "method": method,
                       "question": instance["question"],
                       "gold_answer": instance["answer"], "retriever": rows[0]["retriever"], "vision": vision,
                       "documents": numbered_documents(rows, docs), "raw": None, "answer": None, "finish_reason": None, "error": None,
                       **{f"positive_{m}_documents": sum(1 for d in gold.get(instance_id, ()) if docs.get(d, {}).get("modality") == m)
                          for m in ("text", "image")}}
                with ctx.item(row["id"]):
                    question_imgs = [model_image(store, folder, r, params["max_image_side"])
                                     for r in images_of(instance)] if vision else []
                    tasks.append((row, question_imgs))
        # Table 18: one extraction per distinct document (identical calls are made once by the client)
        needed = {d["doc_id"]: d for row, _ in tasks if row["method"].endswith("_ke") for d in row["documents"]}
        extract_requests = []
        for doc_id, doc in sorted(needed.items()):
            image = doc["modality"] == "image" and vision
            try:
                attached = [image_of(doc)] if image else []
            except Reject as missing:  # a document's image is the release's, for every instance that retrieved it
                raise StageError(f"document {doc_id}: {missing.detail}") from None
            extract_requests.append(LLMRequest(
                id=doc_id, prompt=EXTRACT, images=attached,
                variables={"modality": doc["modality"], "text": doc["text"], "image": image},
                sampling={**sampling, **({"max_tokens": params["extract_max_tokens"]} if params["extract_max_tokens"] else {})}))
        extractions = dict(zip(sorted(needed), client.run(extract_requests, desc=f"extract {params['model']}")))
        ready, requests = [], []
        for row, question_imgs in tasks:
            ke = row["method"].endswith("_ke")
            if ke:
                failed = [d["doc_id"] for d in row["documents"] if not extractions[d["doc_id"]].ok]
                if failed:
                    first = extractions[failed[0]]
                    failed_generation(ctx, row, f"extraction_failed: Table 18 failed for {failed}: {first.error}", first.raw)
                    continue
                for d in row["documents"]:
                    d["extraction"] = extractions[d["doc_id"]].value
            with ctx.item(row["id"], counted=False):
                views, images = shown(row["documents"], vision, image_of, ke)
                requests.append(LLMRequest(
                    id=row["id"], prompt=PROMPTS[row["method"].removesuffix("_ke")], images=question_imgs + images,
                    variables={"question": row["question"], "documents": views, "question_images": len(question_imgs),
                               "vision": vision, "extracted": ke}, sampling=sampling))
                ready.append(row)
        answers = client.run(requests, desc=f"answers {params['model']}")
        for row, answer in zip(ready, answers):
            if not answer.ok:
                failed_generation(ctx, row, answer.error, answer.raw)
                continue
            row["raw"] = answer.value
            row["answer"] = remove_thinking(answer.value)
            row["finish_reason"] = answer.finish_reason
            ctx.stats["truncated"] += answer.finish_reason == "length"
            ctx.write("responses", [row])


def failed_generation(ctx, row: dict, error: str, raw: str | None) -> None:
    """A response whose generation failed: kept with its reason, an empty answer and what came back."""
    row.update(error=error, raw=raw or "", answer="")
    ctx.stats["failed_generations"] += 1
    ctx.write("responses", [row])


STAGE = Stage(
    name="mavis_generate_answers",
    version=VERSION,
    doc=__doc__,
    inputs={
        "retrieved": Input("mavis_eval_retrieved from mavis_retrieve", table="mavis_eval_retrieved"),
        "release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb", kind="file"),
    },
    outputs={"responses": Output("mavis_eval_responses", "one answer per (instance, setting, method)")},
    params={
        "model": Param(str, help="the candidate's name (config eval_mavis.models[].name)", pattern=r"^[A-Za-z0-9_.-]+$"),
        "llm": Param(dict, {}, "llm settings of the candidate (the llm: section with the model's overrides)", schema="llm"),
        "vision": Param(bool, None, "send images as images; null = what the backend takes (llamacpp: no)"),
        "methods": Param(list, ["vanilla"], "answer methods: vanilla (Table 16), cot (Table 17), vanilla_ke / cot_ke (Table 18 first)",
                         items=Param(str, choices=METHODS), min=1),
        "temperature": Param(float, 0.7, "sampling temperature (App. C.1)", min=0),
        "top_p": Param(float, 0.95, "nucleus sampling top-p (App. C.1)", above=0, max=1),
        "max_tokens": Param(int, 2048, "answer length budget in tokens (App. C.1: 2048; 0 = the prompt's default)", min=0),
        "extract_max_tokens": Param(int, 2048, "budget of one Table 18 extraction (App. C.1: 2048 for every response; 0 = the prompt's default)", min=0),
        "max_image_side": Param(int, 512, "longer side of images sent to the model, in pixels (App. C.1)", min=32),
    },
    run=run,
    prompts=("mavis_eval_vanilla", "mavis_eval_cot", "mavis_eval_extract"),
    rejects={
        **MODEL_IMAGE_REJECTS,
        "invalid_answer": "the answer call failed after the client's retries (raw text kept)",
        "extraction_failed": "a Table 18 extraction call failed for one of the response's documents",
    },
)

if __name__ == "__main__":
    STAGE.main()
