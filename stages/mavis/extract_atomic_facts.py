"""Split each gold answer into atomic facts and keep the relevant, verifiable ones (MAVIS §3.2
Step 2 and App. A.2, Tables 9-10).

"First, we split the answer into individual sentences ... Each sentence is then processed using
the prompt in Table 9 to extract atomic facts. After extraction, we filter the facts using the
prompt in Table 10, based on two criteria: (1) whether the fact is relevant to the question, and
(2) whether it was provided by the questioner. Irrelevant facts are discarded. If a fact was
explicitly stated by the questioner, it is treated as non-verifiable and removed."
Sentences come from blingfire's bundled sentence model (offline; the seed uses NLTK's). Table 9
(prompts/mavis_atomic_facts.md) runs once per sentence, Table 10 (prompts/mavis_fact_filter.md)
once per fact (`max_sentences`, a demo knob, 0 = all as in the seed, caps the sentences per
answer). Table 10 shows the question with its image: a backend that takes images gets the
post's first kept image (input `images`) and the row's `mode` is `image`; a text-only backend
(the embedded model) gets the post title as a text stand-in, `mode` `title`.

Input `instances` (reddit_instances), optional `images` (images_cached, or images_deduped when
images.filters is on; owner = post id).
Output `facts` (mavis_facts): the kept facts, id `<instance id>#<sentence>.<fact>`.
Rejects, by item:
- a sentence (`<instance id>#<sentence>`): invalid_extraction (the Table 9 answer failed its
  schema after retries; the detail has the raw text);
- a fact (its fact id): duplicate_fact (the same subclaim earlier in the answer), irrelevant,
  provided_by_asker, invalid_filter_answer;
- an instance: no_sentences (an empty answer).
Invariant (fan-out): instances in = instances split + no_sentences rejects; sentences = sentences
extracted + invalid_extraction rejects; facts extracted = facts out + fact rejects.
"""
from __future__ import annotations

import blingfire

from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.mavis.post_images import first_image_by_owner
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"

FACT_REASONS = ("duplicate_fact", "irrelevant", "provided_by_asker", "invalid_filter_answer")


def sentences(text: str) -> list[str]:
    text = text.strip()
    if not text:
        return []
    return [s.strip() for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]


def first_images(ctx) -> dict[str, str]:
    """post id -> sha256 of its first kept image (gallery order)."""
    return first_image_by_owner(ctx.read_rows("images")) if ctx.has_input("images") else {}


def run(ctx):
    p = ctx.params
    instances = ctx.read_rows("instances")
    vision = sees_images(p)
    images = first_images(ctx) if vision else {}
    with LLMClient.from_params(p["llm"], stats=ctx.stats) as llm:
        split: list[tuple[dict, int, str]] = []  # (instance, sentence index, sentence)
        for inst in instances:
            with ctx.item(inst["id"]):
                found = sentences(inst["answer"])
                if not found:
                    raise Reject("no_sentences", "the answer is empty")
                split += [(inst, i, s) for i, s in enumerate(found[: p["max_sentences"] or None])]
        ctx.stats["sentences"] = len(split)
        answers = llm.run([LLMRequest(f"{inst['id']}#{i}", "mavis_atomic_facts", {"question": inst["question"], "sentence": s})
                           for inst, i, s in split], desc="table 9 facts")
        facts: list[dict] = []
        first_of: dict[tuple[str, str], str] = {}  # (instance, normalized text) -> the fact id that said it first
        for (inst, i, s), answer in zip(split, answers):
            with ctx.item(answer.id, counted=False):
                if not answer.ok:
                    raise Reject("invalid_extraction", answer.detail)
                for k, text in enumerate(t.strip() for t in answer.value["subclaims"]):
                    if text:
                        image = images.get(inst["post_id"])
                        facts.append({"fact_id": f"{answer.id}.{k}", "instance_id": inst["id"], "sentence": i, "sentence_text": s,
                                      "text": text, "image": image, "inst": inst, "mode": "image" if image else "title"})
        ctx.stats["facts_extracted"] = len(facts)
        unique = []
        for fact in facts:  # a subclaim repeated within one answer is one fact
            with ctx.item(fact["fact_id"], counted=False):
                first = first_of.setdefault((fact["instance_id"], " ".join(fact["text"].lower().split())), fact["fact_id"])
                if first != fact["fact_id"]:
                    raise Reject("duplicate_fact", f"same as {first}: {fact['text'][:300]}")
                unique.append(fact)
        facts = unique
        requests = [LLMRequest(f["fact_id"], "mavis_fact_filter",
                               {"question": f["inst"]["question"], "body": f["inst"]["body"], "fact": f["text"],
                                "image_text": "" if f["image"] else f["inst"]["question"]},
                               images=[f["image"]] if f["image"] else [])
                    for f in facts]
        verdicts = llm.run(requests, desc="table 10 filter")
    kept = []
    for fact, verdict in zip(facts, verdicts):
        with ctx.item(fact["fact_id"], counted=False):
            if not verdict.ok:
                raise Reject("invalid_filter_answer", verdict.detail)
            relevance, source = verdict.value["relevance"], verdict.value["source"]
            if relevance != "Relevant":
                raise Reject("irrelevant", f"{fact['text'][:300]} ({fact['mode']})")
            if source != "Verifiable":
                raise Reject("provided_by_asker", f"{fact['text'][:300]} (source: {source}, {fact['mode']})")
            kept.append({"fact_id": fact["fact_id"], "instance_id": fact["instance_id"], "sentence": fact["sentence"],
                         "sentence_text": fact["sentence_text"], "text": fact["text"], "relevance": relevance.lower(),
                         "verifiable": source.lower(), "mode": fact["mode"]})
    ctx.write("facts", kept)


def invariant(ctx) -> str | None:
    by = ctx.rejected_by_reason
    split = ctx.rows_in - by["no_sentences"]
    if ctx.stats["sentences"] < split:
        return f"{split} instances split into only {ctx.stats['sentences']} sentences"
    if ctx.stats["facts_extracted"] != ctx.rows_out("facts") + sum(by[r] for r in FACT_REASONS):
        return (f"facts extracted {ctx.stats['facts_extracted']} != facts kept {ctx.rows_out('facts')} + "
                f"fact rejects {sum(by[r] for r in FACT_REASONS)}")
    return None


STAGE = Stage(
    name="extract_atomic_facts",
    version=VERSION,
    doc=__doc__,
    inputs={
        "instances": Input("reddit_instances shards: the (question, answer) pairs", many=True, table="reddit_instances"),
        "images": Input("the posts' images, shown to a backend that takes images (images_cached shards, or images.filters' output)",
                        many=True, optional=True, table="images_cached"),
    },
    outputs={"facts": Output("mavis_facts", "kept atomic facts: relevant to the question and verifiable")},
    params={
        "llm": Param(dict, {}, "the config llm: section (backend, model, cache, ...), per-stage overrides merged in", schema="llm"),
        "vision": Param(bool, None, "show the post image in Table 10; null = what the backend takes (llamacpp: no)"),
        "max_sentences": Param(int, 0, "a demo knob: split only the first N sentences of each answer; 0 = all (the seed)", min=0),
    },
    run=run,
    invariant=invariant,
    prompts=("mavis_atomic_facts", "mavis_fact_filter"),
    rejects={
        "no_sentences": "an instance whose answer is empty",
        "invalid_extraction": "a sentence whose Table 9 answer failed its schema after retries (raw text in the detail)",
        "duplicate_fact": "a fact repeating a subclaim stated earlier in the same answer",
        "invalid_filter_answer": "a fact whose Table 10 answer failed its schema after retries",
        "irrelevant": "a fact the Table 10 filter judged not relevant to the question",
        "provided_by_asker": "a fact the Table 10 filter judged provided by the asker, not verifiable",
    },
)

if __name__ == "__main__":
    STAGE.main()
