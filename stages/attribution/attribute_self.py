"""Self-attribution baseline (cite-while-you-generate.txt §4.2 "Model self-attribution", App. E):
the summariser is asked, with the annotator's prompt (prompts/attribution_cite.md), which source
sentences (and IMG) each of its summary sentences comes from.

`llm` should name the model that wrote the summaries: the demo's summariser is SmolLM2-135M through
transformers, and the default llm backend is the same SmolLM2-135M GGUF through llama.cpp. A model
with an image gets the image itself when it takes images (`vision`, App. E: "one associated
image"), and its description (the item's, else the img_cap caption) in the prompt.

Input: generations (attr_generations), source_items (attr_items). Output: citations (attr_citations,
method self), one row per summary sentence. Rejects: invalid_answer (no entry for some summary
sentence, or an unknown id, after the client's retries; the raw answer is the detail),
image_unreadable (the item's image, to be sent, cannot be read).
"""
from __future__ import annotations

from stages.attribution.attribution import IMAGE_UNREADABLE, IMG, cite_request, every_generation
from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "2"  # 2: the image itself goes with the prompt to a model that takes images


def requests_for(gens: list[dict], items: dict, max_tokens: int, store: ImageStore,
                 vision: bool) -> tuple[list[LLMRequest], dict, dict]:
    """The App. E requests, the listed units of each generation, and the generations rejected before asking."""
    requests, units, rejected = [], {}, {}
    for gen in gens:
        try:
            request, units[gen["id"]] = cite_request(gen, items.get(gen["item_id"]), store, vision, max_tokens)
        except Reject as reject:
            rejected[gen["id"]] = reject
            continue
        requests.append(request)
    return requests, units, rejected


def to_units(cited: list[list[str]], units: list[str]) -> list[list[str]]:
    """Listed positions -> unit names (img_cap lists fewer sentences than it has units)."""
    return [[u if u == IMG else units[int(u)] for u in c] for c in cited]


def run(ctx):
    params = ctx.params
    gens = ctx.read_rows("generations")
    items = {r["id"]: r for r in ctx.read_rows("source_items")}
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        store = ImageStore(client.settings["image_store"])
        requests, units, rejected = requests_for(gens, items, params["max_tokens"], store, sees_images(params))
        answers = dict(zip([r.id for r in requests], client.run(requests, desc="self-attribution")))
    for gen in gens:
        with ctx.item(gen["id"]):
            if gen["id"] in rejected:
                raise rejected[gen["id"]]
            answer = answers[gen["id"]]
            if not answer.ok:
                raise Reject("invalid_answer", answer.detail)
            cited = to_units(answer.value, units[gen["id"]])
            ctx.write("citations", [{
                "id": f"cite:self:{gen['id']}:{j}", "generation_id": gen["id"], "item_id": gen["item_id"], "mode": gen["mode"],
                "method": "self", "sentence_index": j, "sentence": s, "sources": cited[j], "image_score": None,
            } for j, s in enumerate(gen["summary_sentences"])])
            ctx.stats["generations_attributed"] += 1


STAGE = Stage(
    name="attribute_self",
    version=VERSION,
    doc=__doc__,
    inputs={
        "generations": Input("attr_generations from generate_attributed", table="attr_generations"),
        "source_items": Input("attr_items from attribution_inputs", table="attr_items"),
    },
    outputs={"citations": Output("attr_citations", "one row per summary sentence", counted=False)},
    params={
        "llm": Param(dict, {}, "llm settings of the summariser asked for its own citations", schema="llm"),
        "max_tokens": Param(int, 0, "answer length budget in tokens (0 = the prompt's 200)", min=0),
        "vision": Param(bool, None, "send the item's image (App. E); null = what the backend takes (llamacpp: no, its description only)"),
    },
    run=run,
    invariant=every_generation,
    prompts=("attribution_cite",),
    rejects={"invalid_answer": "no valid entry for some summary sentence, or an unknown id, after the client's retries (raw answer in the detail)",
             **IMAGE_UNREADABLE},
)

if __name__ == "__main__":
    STAGE.main()
