"""Reference attributions of the summary sentences (cite-while-you-generate.txt §4.3, App. E).

Gold citations given in the items file are matched to generated sentences by their text
(lower-cased, punctuation removed); every other sentence gets a silver reference from a judge model
asked with the App. E annotator prompt (prompts/attribution_cite.md), as the seed does with GPT.
Each row records its origin (file | silver) so a report never passes silver off as gold. Without a
judge (`judge` empty) unmatched sentences have no reference and are left out of the scores.
A judge that takes images gets the image itself (`vision`, App. E: "one associated image"), and
its description (the item's, else the img_cap caption) in the prompt.

Input: generations (attr_generations), source_items (attr_items). Output: references (attr_references),
one row per referenced summary sentence. Rejects: invalid_answer (the judge's answer has no valid
entry for a summary sentence, or an unknown id, after retries; the raw answer is the detail),
image_unreadable (the item's image, to be sent to the judge, cannot be read).
"""
from __future__ import annotations

from stages.attribution.attribution import IMAGE_UNREADABLE, IMG, cite_request, normalise, order_units
from stages.core.images import ImageStore
from stages.core.llm import LLMClient, llm_settings, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "2"  # 2: the image itself goes with the prompt to a judge that takes images


def file_references(gen: dict, item: dict | None) -> dict[int, list[str]]:
    """Summary sentence index -> gold sources, for sentences the items file names."""
    gold = {normalise(c["sentence"]): c["sources"] for c in (item or {}).get("reference_citations") or []}
    allowed = set(gen["units"]) | ({IMG} if gen["has_image"] else set())
    found = {}
    for j, s in enumerate(gen["summary_sentences"]):
        if normalise(s) in gold:
            found[j] = order_units([u for u in gold[normalise(s)] if u in allowed])
    return found


def run(ctx):
    params = ctx.params
    gens = ctx.read_rows("generations")
    items = {r["id"]: r for r in ctx.read_rows("source_items")}
    from_file = {g["id"]: file_references(g, items.get(g["item_id"])) for g in gens}
    asked, requests, listed, rejected = [], [], {}, {}
    store, vision = ImageStore(llm_settings(params["llm"])["image_store"]), params["judge"] and sees_images(params)
    for gen in gens:
        if params["judge"] and len(from_file[gen["id"]]) < len(gen["summary_sentences"]):
            try:
                request, listed[gen["id"]] = cite_request(gen, items.get(gen["item_id"]), store, vision, params["max_tokens"])
            except Reject as reject:
                rejected[gen["id"]] = reject
                continue
            asked.append(gen["id"])
            requests.append(request)
    answers = {}
    if requests:
        with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
            answers = dict(zip(asked, client.run(requests, desc="reference judge")))
    for gen in gens:
        with ctx.item(gen["id"]):
            if gen["id"] in rejected:
                raise rejected[gen["id"]]
            answer = answers.get(gen["id"])
            if answer is not None and not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            rows = []
            for j, sentence in enumerate(gen["summary_sentences"]):
                if j in from_file[gen["id"]]:
                    sources, origin = from_file[gen["id"]][j], "file"
                elif answer is not None:
                    units = listed[gen["id"]]
                    sources, origin = order_units([u if u == IMG else units[int(u)] for u in answer.value[j]]), "silver"
                else:
                    ctx.stats["sentences_without_reference"] += 1
                    continue
                ctx.stats[f"references_{origin}"] += 1
                rows.append({"id": f"ref:{gen['id']}:{j}", "generation_id": gen["id"], "item_id": gen["item_id"], "mode": gen["mode"],
                             "sentence_index": j, "sentence": sentence, "sources": sources, "origin": origin,
                             "judge": params["judge"] if origin == "silver" else None})
            ctx.write("references", rows)
            ctx.stats["generations_referenced"] += 1


def every_generation(ctx) -> str | None:
    done = ctx.stats["generations_referenced"]
    if ctx.rows_in != done + ctx.rejected:
        return f"generations in {ctx.rows_in} != referenced {done} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="attribution_references",
    version=VERSION,
    doc=__doc__,
    inputs={
        "generations": Input("attr_generations from generate_attributed", table="attr_generations"),
        "source_items": Input("attr_items (their reference citations)", table="attr_items"),
    },
    outputs={"references": Output("attr_references", "one row per referenced summary sentence", counted=False)},
    params={
        "judge": Param(str, "", "the judge's name, recorded in silver rows ('' = no judge: file references only)"),
        "llm": Param(dict, {}, "llm settings of the judge", schema="llm"),
        "max_tokens": Param(int, 0, "answer length budget in tokens (0 = the prompt's 200)", min=0),
        "vision": Param(bool, None, "send the item's image (App. E); null = what the judge's backend takes (llamacpp: no, its description only)"),
    },
    run=run,
    invariant=every_generation,
    prompts=("attribution_cite",),
    rejects={"invalid_answer": "the judge's answer has no valid entry for a summary sentence, or an unknown id, after retries (raw answer in the detail)",
             **IMAGE_UNREADABLE},
)

if __name__ == "__main__":
    STAGE.main()
