"""Sample the instances for human annotation and export the annotators' sheet (MAVIS §3.2 Step 3,
App. A.4-A.5).

"First, to ensure multimodal knowledge is necessary for answering the visual question, we select
instances containing more than two atomic facts supported by multimodal documents. Second, to
mitigate domain bias in the test set, we perform balanced sampling across different domains,
resulting in 1,000 VQA instances." A fact is supported when it has an entailed document of both
modalities (`both_modalities`; false: of either). Eligible instances have more than
`min_supported_facts` (the seed: 2) such facts. The sample is the seeded stratified sampler of
stages/core/quotas.py with `size` split evenly over the `domains` (App. A.4, Table 11's six); a
domain short of eligible instances gives all it has and the others fill the rest.

The sheet (stages/core/review.py, the same round trip as MCiteBench's quality control) has one row
per fact of a sampled instance that has an entailed document: the two questions of App. A.5 ("Is
the fact relevant to the question?" -> `relevant`; "Are the statements accurately grounded in the
supporting documents?" -> `grounded_k` per shown document), with "up to three documents ... for
each sentence" (`docs_per_fact`, the best-scored entailed documents, the best of each modality
first). Annotators fill relevant (yes | no) and, for a relevant fact, grounded_k (yes | no);
release_mavis imports the filled copy (config `mavis.annotations`) and honours it: the annotated
instances form the `test` split, facts judged irrelevant leave the release, and a test fact's
positive documents are the ones judged grounded.

Inputs `instances` (reddit_instances), `facts` (mavis_facts), `judged` (mavis_judged_documents),
`documents` (mavis_documents). Outputs `sample` (mavis_annotation_sample) and `sheet` (CSV).
Nothing is rejected but what the table contract rejects on read: an instance is sampled, or left
behind counted as `not_eligible` (too few supported facts) or `not_sampled` (eligible, beyond its
domain's quota). Invariant: instances in = sampled + not_sampled + not_eligible + rejected.
"""
from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.compute as pc

from stages.core.quotas import sample
from stages.core.review import write_sheet
from stages.core.stage import Input, Output, Param, Stage

VERSION = "2"  # 2: instances left behind counted (not_eligible, not_sampled)


def sheet_columns(docs_per_fact: int) -> list[str]:
    columns = ["instance_id", "domain", "question", "fact_id", "fact", "relevant"]
    for k in range(1, docs_per_fact + 1):
        columns += [f"doc_{k}", f"doc_{k}_modality", f"doc_{k}_content", f"grounded_{k}"]
    return columns + ["note"]


def shown(entailed: list[dict], k: int) -> list[dict]:
    """Up to k entailed documents, best score first, the best of each modality before the rest."""
    ranked = sorted(entailed, key=lambda r: (-r["score"], r["rank"], r["doc_id"]))
    firsts = [next(r for r in ranked if r["modality"] == m) for m in ("text", "image") if any(r["modality"] == m for r in ranked)]
    return (firsts + [r for r in ranked if r not in firsts])[:k]


def run(ctx) -> None:
    p = ctx.params
    instances = sorted(ctx.read_rows("instances"), key=lambda r: r["id"])
    ctx.add_input(len(instances))
    facts_of = collections.defaultdict(list)
    for fact in sorted(ctx.read_rows("facts"), key=lambda f: f["fact_id"]):
        facts_of[fact["instance_id"]].append(fact)
    # tens of millions of judged pairs at real scale: only the entailed ones become Python rows
    judged = ctx.read("judged")
    entailed = collections.defaultdict(list)
    for row in judged.filter(judged["entailed"]).select(["fact_id", "doc_id", "rank", "modality", "score"]).to_pylist():
        entailed[row["fact_id"]].append(row)

    def supported(fact) -> bool:
        modalities = {r["modality"] for r in entailed[fact["fact_id"]]}
        return modalities >= {"text", "image"} if p["both_modalities"] else bool(modalities)

    eligible = []
    for inst in instances:
        n = sum(1 for f in facts_of[inst["id"]] if supported(f))
        if n > p["min_supported_facts"]:
            eligible.append({"id": inst["id"], "domain": inst["domain"], "supported_facts": n, "question": inst["question"]})
    domains = p["domains"] or sorted({e["domain"] for e in eligible})
    share, extra = divmod(p["size"], len(domains)) if domains else (0, 0)
    quotas = {"total": p["size"], "seed": p["seed"], "domain": {d: share + (i < extra) for i, d in enumerate(domains)}}
    picked, achieved = sample(eligible, quotas, dimensions=("domain",))
    ctx.stats["eligible"] = len(eligible)
    ctx.stats["not_eligible"] = len(instances) - len(eligible)
    ctx.stats["not_sampled"] = len(eligible) - len(picked)
    for row in achieved:
        if row["dimension"] == "domain":
            ctx.stats[f"sampled[{row['value']}]"] = row["achieved"]
    ctx.write("sample", [{"instance_id": e["id"], "domain": e["domain"], "supported_facts": e["supported_facts"]} for e in picked])

    to_show = [(e, fact, shown(entailed[fact["fact_id"]], p["docs_per_fact"])) for e in picked for fact in facts_of[e["id"]]]
    documents = ctx.read("documents")  # only the shown ones become Python rows
    wanted = pa.array(sorted({r["doc_id"] for _, _, docs in to_show for r in docs}), pa.string())
    documents = {d["doc_id"]: d for d in documents.filter(pc.is_in(documents["doc_id"], wanted)).to_pylist()}
    rows = []
    for e, fact, docs in to_show:
        if not docs:
            continue  # "instances without supporting documents were removed": nothing to ground
        row = {"instance_id": e["id"], "domain": e["domain"], "question": e["question"], "fact_id": fact["fact_id"],
               "fact": fact["text"], "relevant": "", "note": ""}
        for k, r in enumerate(docs, 1):
            doc = documents.get(r["doc_id"], {})
            content = doc.get("url") if r["modality"] == "image" else doc.get("text")
            row |= {f"doc_{k}": r["doc_id"], f"doc_{k}_modality": r["modality"], f"doc_{k}_content": content or "", f"grounded_{k}": ""}
        rows.append(row)
    write_sheet(ctx.output_path("sheet"), sheet_columns(p["docs_per_fact"]), rows)
    ctx.stats["sheet_rows"] = len(rows)


def invariant(ctx) -> str | None:
    s = ctx.stats
    if ctx.rows_in != ctx.rows_out("sample") + s["not_sampled"] + s["not_eligible"] + ctx.rejected:
        return (f"instances in {ctx.rows_in} != sampled {ctx.rows_out('sample')} + not sampled {s['not_sampled']} + not eligible "
                f"{s['not_eligible']} + rejected {ctx.rejected}")
    return None


STAGE = Stage(
    name="sample_annotation",
    version=VERSION,
    doc=__doc__,
    inputs={
        "instances": Input("reddit_instances shards: the candidates and their domains", many=True, table="reddit_instances"),
        "facts": Input("mavis_facts shards", many=True, table="mavis_facts"),
        "judged": Input("mavis_judged_documents: the entailment decisions", many=True, table="mavis_judged_documents"),
        "documents": Input("mavis_documents: what the sheet shows", many=True, table="mavis_documents"),
    },
    outputs={
        "sample": Output("mavis_annotation_sample", "the sampled instances", counted=False),
        "sheet": Output(None, "CSV for annotators: one row per fact, relevant and grounded_k to fill"),
    },
    params={
        "size": Param(int, 1000, "instances to sample (the seed: 1,000)", min=0),
        "seed": Param(int, 0, "sampling seed"),
        "domains": Param(list, [], "domains to balance over (App. A.4's six); empty = those of the eligible instances",
                         items=Param(str)),
        "min_supported_facts": Param(int, 2, "eligible with more than this many supported facts (the seed: more than two)", min=0),
        "both_modalities": Param(bool, True, "a fact is supported by an entailed document of each modality (false: of either)"),
        "docs_per_fact": Param(int, 3, "documents shown per fact (the seed: up to three)", min=1),
    },
    run=run,
    invariant=invariant,
    rejects={},  # an instance is sampled or not
)

if __name__ == "__main__":
    STAGE.main()
