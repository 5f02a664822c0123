"""Drop the instances a text-only model can answer without the image (MAVIS §3.2 Step 1, the
visual-dependency check, App. A.1 Tables 7-8).

Several text-only models ("inspectors", the `answerers` list; each any llm backend) answer the
question without its image, asked to imagine it (Table 7, prompts/mavis_answer_without_image.md).
A judge ("evaluator") sees the image, the question, the gold answer and each response and says
whether the response is right (Table 8, prompts/mavis_judge_visual.md, asked as yes/no and scored
as P(yes)). An instance is dropped when more than `max_right` (the seed: 0, i.e. any) of the
models are judged right. A judge that takes images gets the post's first kept image (input
`images`); a text-only judge gets the post title as a text stand-in, recorded per verdict as
`mode`. All the answerers' calls are in flight together and each response goes to the
judge as it arrives, so every model's server is busy at once. Responses and verdicts are their own
tables: the decision (`max_right`, `right_threshold`) is applied over them, and changing it re-runs
the stage on cached calls only.

Input `instances` (reddit_instances), optional `images` (images_cached, or images_deduped when
images.filters is on; owner = post id).
Outputs `instances` (the kept instances, same schema), `responses` (mavis_blind_responses),
`verdicts` (mavis_visual_verdicts).
`limit` (a demo knob, 0 = all as in the seed) checks only the first N instances by id.
Rejects (per instance): over_limit (past `limit`), answered_without_image (detail names the models judged right and their
P(right)), invalid_response (a model's Table 7 answer failed), invalid_verdict (the judge's
answer was not yes/no after retries).
Invariant: instances in = instances kept + rejected; responses and verdicts are not counted.
"""
from __future__ import annotations

import contextlib
from concurrent.futures import as_completed

from tqdm import tqdm

from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.mavis.post_images import first_image_by_owner
from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"


def first_images(ctx) -> dict[str, str]:
    """post id -> sha256 of its first kept image (gallery order)."""
    return first_image_by_owner(ctx.read_rows("images")) if ctx.has_input("images") else {}


def run(ctx):
    p = ctx.params
    instances = sorted(ctx.read_rows("instances"), key=lambda row: row["id"])
    if p["limit"]:
        for inst in instances[p["limit"]:]:
            with ctx.item(inst["id"]):
                raise Reject("over_limit", f"only the first {p['limit']} instances by id are checked (param limit)")
        instances = instances[: p["limit"]]
    images = first_images(ctx) if sees_images({"vision": p["vision"], "llm": p["judge"]}) else {}
    names = [a["name"] for a in p["answerers"]]
    responses: dict[tuple[str, str], object] = {}  # (instance id, model) -> LLMAnswer
    judged = {}  # (instance id, model) -> Future of the judge's LLMAnswer
    with contextlib.ExitStack() as clients:
        # Every answerer's calls go out together and the judge gets each response as it arrives,
        # so all the models' servers stay busy at once.
        judge = clients.enter_context(LLMClient.from_params(p["judge"], stats=ctx.stats))
        asked = {}
        for answerer in p["answerers"]:
            llm = clients.enter_context(LLMClient.from_params(answerer["llm"], stats=ctx.stats))
            for inst in instances:
                asked[llm.submit(LLMRequest(inst["id"], "mavis_answer_without_image", {"question": inst["question"]}))] = inst, answerer["name"]
        for future in tqdm(as_completed(asked), total=len(asked), desc="table 7 answers", unit="call", leave=False):
            inst, name = asked[future]
            response = responses[inst["id"], name] = future.result()
            if response.ok:
                image = images.get(inst["post_id"])
                judged[inst["id"], name] = judge.submit(LLMRequest(
                    f"{inst['id']}|{name}", "mavis_judge_visual",
                    {"question": inst["question"], "gold_answer": inst["answer"], "response": response.value,
                     "image_text": "" if image else inst["question"]}, images=[image] if image else []))
        verdicts = {}  # (instance id, model) -> (LLMAnswer, mode), in instance order
        for inst in instances:
            for key in ((inst["id"], name) for name in names if (inst["id"], name) in judged):
                verdicts[key] = judged[key].result(), "image" if images.get(inst["post_id"]) else "title"
    ctx.write("responses", [{"instance_id": inst["id"], "model": name, "response": responses[inst["id"], name].value}
                            for name in names for inst in instances if responses[inst["id"], name].ok])
    ctx.write("verdicts", [{"instance_id": i, "model": m, "verdict": "right" if a.value == "yes" else "wrong",
                            "p_right": p_right(a), "mode": mode} for (i, m), (a, mode) in verdicts.items() if a.ok])
    kept = []
    for inst in instances:
        with ctx.item(inst["id"]):
            right = []
            for name in (a["name"] for a in p["answerers"]):
                response = responses[inst["id"], name]
                if not response.ok:
                    raise Reject("invalid_response", f"{name}: {response.detail}")
                verdict, _ = verdicts[inst["id"], name]
                if not verdict.ok:
                    raise Reject("invalid_verdict", f"judging {name}: {verdict.detail}")
                if p_right(verdict) >= p["right_threshold"]:
                    right.append(f"{name} (P(right) {p_right(verdict):.2f})")
            if len(right) > p["max_right"]:
                raise Reject("answered_without_image", "judged right without the image: " + ", ".join(right))
            kept.append(inst)
    ctx.write("instances", kept)


def p_right(answer) -> float:
    if answer.p_yes is not None:
        return float(answer.p_yes)
    return 1.0 if answer.value == "yes" else 0.0


STAGE = Stage(
    name="filter_visual_dependency",
    version=VERSION,
    doc=__doc__,
    inputs={
        "instances": Input("reddit_instances shards: the (question, answer) pairs", many=True, table="reddit_instances"),
        "images": Input("the posts' images, shown to a judge that takes images (images_cached shards, or images.filters' output)",
                        many=True, optional=True, table="images_cached"),
    },
    outputs={
        "instances": Output("reddit_instances", "the instances that need their image"),
        "responses": Output("mavis_blind_responses", "Table 7 answers without the image", counted=False),
        "verdicts": Output("mavis_visual_verdicts", "Table 8 verdicts per (instance, model)", counted=False),
    },
    params={
        "answerers": Param(list, help="the text-only inspector models (Table 7)", min=1, items=Param(dict, fields={
            "name": Param(str, help="a short name, used in tables and reject details", pattern=Param.PLAIN_NAME),
            "llm": Param(dict, {}, "llm settings of this model (the llm: section with its overrides)", schema="llm"),
        })),
        "judge": Param(dict, {}, "llm settings of the evaluator (Table 8), a vision-language model in the real recipe", schema="llm"),
        "vision": Param(bool, None, "show the post image to the judge; null = what the judge's backend takes (llamacpp: no)"),
        "max_right": Param(int, 0, "drop an instance when more than this many models are judged right (the seed: 0)", min=0),
        "right_threshold": Param(float, 0.5, "a response counts as right when the judge's P(right) reaches this", min=0, max=1),
        "limit": Param(int, 0, "a demo knob: check only the first N instances by id, reject the rest (over_limit); 0 = all", min=0),
    },
    run=run,
    prompts=("mavis_answer_without_image", "mavis_judge_visual"),
    rejects={
        "over_limit": "past the first `limit` instances by id (a demo knob)",
        "answered_without_image": "more than max_right models were judged right without the image (named in the detail)",
        "invalid_response": "a model's Table 7 answer failed after the client's retries",
        "invalid_verdict": "the judge's Table 8 answer was not yes/no after the client's retries",
    },
)

if __name__ == "__main__":
    STAGE.main()
