"""Search query generation (mavis.txt §3.1 step 1, App. C.2 Table 15): from the question and its
image, the candidate model writes N search queries.

The answer is a comma-separated list (Table 15 asks for `"query 1", "query 2", ...`), parsed
deterministically: the quoted strings when there are any, else the comma- or line-separated parts
with list numbering and quotes stripped; empty parts dropped, duplicates once, the first N kept.
A model that cannot see images (`vision` false) reads the question and the post's text with a note
that the image is not shown; one that can gets the question images, their longer side scaled to
`max_image_side` pixels (App. C.1).

Which instances (§3.2 Step 3: "all of our experimental results are based on this human-annotated
test set"): the release's `test` split by default; `splits` asks for others (`train`, the
automatically built rest), each query row carrying its instance's split so the scores and the
report keep the splits apart. `limit` keeps the first N instances by id of each asked split.
Instances of splits not asked are not read (counted in `not_asked`); a release without a `split`
column stops the stage.

Inputs: release (a MAVIS release manifest, folder or benchmark.duckdb; see stages/eval_mavis/mavis_eval.py).
Outputs: queries (mavis_eval_queries), one row per (instance, query).
Rejects (per instance): invalid_answer (the model call failed; raw kept), no_queries (nothing
parsed from the answer), missing_image (a question image file absent from the release).
Invariant: instances in = instances with queries + rejected (the query rows fan out, counted per instance).
Params: model, llm, vision, splits, n_queries, limit, max_image_side, max_tokens.
"""
from __future__ import annotations

import re

from stages.core.ids import content_id
from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMRequest, sees_images
from stages.eval_mavis.mavis_eval import MODEL_IMAGE_REJECTS, load_release, model_image, question_images, release_folder
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "2"
SPLITS = ("test", "train")  # release_mavis: test = the human-annotated sample (§3.2 Step 3), train = the rest
PROMPT = "mavis_eval_queries"
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”")
_NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")


def parse_queries(text: str, n: int) -> list[str]:
    """Up to n distinct queries from a Table 15 answer."""
    quoted = [a or b for a, b in _QUOTED.findall(text)]
    parts = quoted or re.split(r"[,\n]", text)
    queries = []
    for part in parts:
        query = _NUMBERING.sub("", part).strip().strip("'\"“”").strip()
        if query and query.lower().rstrip(":") != "search queries" and query not in queries:
            queries.append(query)
    return queries[:n]


def instances_to_evaluate(release: dict, splits: list[str], limit: int) -> list[dict]:
    """The instances of the asked splits, split by split in the order asked, each in id order and
    cut to its first `limit` (0 = all)."""
    rows = sorted(release["instances"], key=lambda r: r["id"])
    if rows and "split" not in rows[0]:
        raise StageError("release instances have no `split` column (release_mavis writes test | train): cannot pick the test split")
    chosen = []
    for split in dict.fromkeys(splits):
        of_split = [r for r in rows if r["split"] == split]
        chosen += of_split[:limit] if limit else of_split
    return chosen


def run(ctx):
    params = ctx.params
    folder = release_folder(ctx.input_path("release"))
    release = load_release(folder)
    images_of = question_images(release["images"])
    vision = sees_images(params)
    chosen = instances_to_evaluate(release, params["splits"], params["limit"])
    ctx.stats["not_asked"] = sum(1 for r in release["instances"] if r.get("split") not in params["splits"])
    with LLMClient.from_params(params["llm"], stats=ctx.stats) as client:
        store = ImageStore(client.settings["image_store"])
        instances, requests = [], []
        for instance in chosen:
            ctx.stats[f"instances[{instance['split']}]"] += 1
            with ctx.item(instance["id"]):
                images = [model_image(store, folder, row, params["max_image_side"])
                          for row in images_of(instance)] if vision else []
                instances.append(instance)
                requests.append(LLMRequest(
                    id=instance["id"], prompt=PROMPT, images=images,
                    variables={"n": params["n_queries"], "question": instance["question"], "body": instance.get("body") or "",
                               "images": len(images), "vision": vision},
                    sampling={"max_tokens": params["max_tokens"]} if params["max_tokens"] else None))
        answers = client.run(requests, desc=f"queries {params['model']}")
        for instance, answer in zip(instances, answers):
            with ctx.item(instance["id"], counted=False):
                if not answer.ok:
                    raise Reject("invalid_answer", answer.detail)
                queries = parse_queries(answer.value, params["n_queries"])
                if not queries:
                    raise Reject("no_queries", f"no query in the answer {answer.value[:300]!r}")
                ctx.stats["instances_with_queries"] += 1
                ctx.stats["short_of_n"] += len(queries) < params["n_queries"]
                ctx.write("queries", [{"id": content_id("mq", params["model"], instance["id"], i), "model": params["model"],
                                       "instance_id": instance["id"], "split": instance["split"], "query_index": i, "query": q,
                                       "raw": answer.value, "vision": vision} for i, q in enumerate(queries)])


def _invariant(ctx) -> str | None:
    ok = ctx.stats["instances_with_queries"] + ctx.rejected
    return None if ok == ctx.rows_in else f"instances in {ctx.rows_in} != with queries {ctx.stats['instances_with_queries']} + rejected {ctx.rejected}"


STAGE = Stage(
    name="mavis_generate_queries",
    version=VERSION,
    doc=__doc__,
    inputs={"release": Input("MAVIS release manifest JSON, release folder or its benchmark.duckdb", kind="file")},
    outputs={"queries": Output("mavis_eval_queries", "search queries, one row per (instance, query)")},
    params={
        "model": Param(str, help="the candidate's name (config eval_mavis.models[].name)", pattern=r"^[A-Za-z0-9_.-]+$"),
        "llm": Param(dict, {}, "llm settings of the candidate (the llm: section with the model's overrides)", schema="llm"),
        "vision": Param(bool, None, "send the question images; null = what the backend takes (llamacpp: no)"),
        "splits": Param(list, ["test"], "release splits to evaluate, each reported apart (§3.2 Step 3: the human-annotated "
                                        "test split; train = the automatically built rest)", items=Param(str, choices=SPLITS), min=1),
        "n_queries": Param(int, 1, "N, search queries per question (§5.3: N = 1)", min=1),
        "limit": Param(int, 0, "evaluate only the first N instances by id of each asked split (0 = all)", min=0),
        "max_image_side": Param(int, 512, "longer side of images sent to the model, in pixels (App. C.1)", min=32),
        "max_tokens": Param(int, 2048, "answer length budget in tokens (App. C.1: 2048 for every response; 0 = the prompt's default)", min=0),
    },
    run=run,
    invariant=_invariant,
    prompts=("mavis_eval_queries",),
    rejects={
        **MODEL_IMAGE_REJECTS,
        "invalid_answer": "the model call failed after the client's retries (raw text kept)",
        "no_queries": "no query could be parsed from the answer",
    },
)

if __name__ == "__main__":
    STAGE.main()
