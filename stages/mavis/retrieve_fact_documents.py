"""Retrieve the multimodal documents of every kept atomic fact (MAVIS §3.2 Step 2, "Collection of
multimodal documents").

"To collect external multimodal documents grounding atomic facts, we considered two search
sources: Google Programmable Search, which searches the entire web for relevant images, and the
Colossal Clean Crawled Corpus (C4) ... Using each atomic fact as a query, we retrieved the top five
passages from each source."
The fact text is the query of both sources, through the retrieval layer: web images from the
search client (stages.core.search, `image_top_k`, the seed's 5; every request through the fetch
layer, so `fetch.mode: record` keeps a WARC and `replay` rebuilds offline) and C4 passages from the
sharded text index (stages.core.text_index, `text_top_k`, the seed's 5; input `index`, the
build_text_index shards). The images themselves are downloaded, filtered and deduplicated per fact
afterwards by the shared image stages (cache_images -> filter_images -> phash_dedup, run on the
`fact_images` table, rules/mavis.smk); their sha256 joins the documents in the release.

Input `facts` (mavis_facts), `index` (retrieval_text_index), optional `warcs` (replay archives).
Outputs:
- `documents` (mavis_documents): one row per distinct document of the shard; ids are
  `c4:<passage id>` and `webimg:<16 hex of the url>`, so facts sharing a document share its row;
- `fact_documents` (mavis_fact_documents): (fact_id, doc_id, rank, query), rank per source;
- `fact_images` (mavis_fact_images): the image rows again as cache_images' owners table (owner =
  fact, url, the fact text for CLIP).
Rejects (per fact): `empty_fact` (no text), `no_documents` (neither source found anything),
`not_in_archive` (replay: the image search for this fact was never recorded; the fact is not
half-retrieved), and the search client's per-query rejects (stages.core.search): `http_<status>`
(the provider refused this query's request) and `bad_answer` (its JSON is not of the API's shape).
Any other search failure (quota, key, unreachable provider) stops the job, naming the provider:
never an empty result.
Invariant (fan-out): facts in = facts retrieved + rejected; fact_documents = the retrieved facts'
hits (at most image_top_k + text_top_k each); fact_images = the image rows of fact_documents;
every fact_documents doc_id is in documents.
"""
from __future__ import annotations


from stages.core.fetch import FETCH_PARAMS, Fetcher, stage_fetch_settings
from stages.core.ids import content_id
from stages.core.search import SEARCH_PARAMS, SearchCache, SearchFailed, make_provider
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.text_index import ShardIndex, hit_passages, merge_topk

VERSION = "1"


def _shards(ctx) -> list[ShardIndex]:
    manifests = sorted(ctx.read_rows("index"), key=lambda r: r["shard"])
    if not manifests or len(manifests) != manifests[0]["shards"]:
        raise StageError(f"input index does not hold every shard of one index: {[(m['shard'], m['shards']) for m in manifests]}")
    shards, encoder = [], None
    for manifest in manifests:
        try:
            shard = ShardIndex(manifest["path"], encoder=encoder)
        except ValueError as err:
            raise StageError(f"index shard {manifest['shard']}: {err}") from None
        encoder = getattr(shard, "encoder", None)  # dense: one model for every shard
        shards.append(shard)
    return shards


def _passages(shards: list[ShardIndex], texts: list[str], k: int) -> list[list[dict]]:
    """Per query, the top k passages over every shard (shard statistics, merged by score)."""
    if not k or not texts:
        return [[] for _ in texts]
    per_query: list[list] = [[] for _ in texts]
    for shard in shards:
        for hits, shard_hits in zip(per_query, shard.search(texts, k)):
            hits.append(shard_hits)
    return hit_passages(shards, [merge_topk(hits, k) for hits in per_query])


def run(ctx) -> None:
    p = ctx.params
    if not p["image_top_k"] and not p["text_top_k"]:
        raise StageError("image_top_k and text_top_k are both 0: nothing to retrieve")
    settings = stage_fetch_settings(ctx)
    try:
        provider = make_provider(p["provider"], p["provider_settings"], need_key=settings.mode != "replay") if p["image_top_k"] else None
    except (ValueError, SearchFailed) as err:
        raise StageError(str(err)) from None
    # record asks again (the WARC must hold every answer); replay reads only its WARC
    cache = SearchCache(p["cache_dir"], {"replay": "off", "record": "off" if p["cache_mode"] == "off" else "refresh"}.get(settings.mode, p["cache_mode"]))
    facts = [f for f in ctx.read_rows("facts")]
    shards = _shards(ctx) if p["text_top_k"] else []
    asked = []
    for fact in facts:
        with ctx.item(fact["fact_id"]):
            if not fact["text"].strip():
                raise Reject("empty_fact", "the fact has no text")
            asked.append(fact)
    passages = _passages(shards, [f["text"] for f in asked], p["text_top_k"])

    documents: dict[str, dict] = {}
    pairs, images = [], []
    with Fetcher(settings, record_to=p["record_warc"] or None) as fetcher:
        for fact, found in zip(asked, passages):
            with ctx.item(fact["fact_id"], counted=False):
                query = fact["text"]
                hits = []
                if provider is not None:
                    hits = cache.get(provider, "image", query, p["image_top_k"])
                    if hits is None:
                        try:
                            hits = provider.search(fetcher, query, "image", p["image_top_k"])
                        except SearchFailed as err:
                            if err.reason == "not_in_archive":
                                raise Reject("not_in_archive", f"image search for {query[:200]!r}: {err}") from None
                            raise StageError(f"{err} (fact {fact['fact_id']!r}, image search)") from None
                        cache.put(provider, "image", query, p["image_top_k"], hits)
                if not hits and not found:
                    raise Reject("no_documents", f"no image result and no passage for {query[:200]!r}")
                for rank, passage in enumerate(found, 1):
                    doc_id = f"c4:{passage['passage_id']}"
                    documents.setdefault(doc_id, {"doc_id": doc_id, "modality": "text", "source": "c4", "url": None,
                                                  "text": passage["text"], "image_sha256": None})
                    pairs.append({"fact_id": fact["fact_id"], "doc_id": doc_id, "rank": rank, "query": query})
                for hit in hits:
                    doc_id = content_id("webimg", hit.url)
                    documents.setdefault(doc_id, {"doc_id": doc_id, "modality": "image", "source": "web_image", "url": hit.url,
                                                  "text": " - ".join(t for t in (hit.title, hit.snippet) if t), "image_sha256": None})
                    pairs.append({"fact_id": fact["fact_id"], "doc_id": doc_id, "rank": hit.rank, "query": query})
                    images.append({"fact_id": fact["fact_id"], "doc_id": doc_id, "rank": hit.rank, "url": hit.url, "text": query})
                ctx.stats["facts_retrieved"] += 1
                ctx.stats["text_pairs"] += len(found)
                ctx.stats["image_pairs"] += len(hits)
    for key, value in fetcher.stats.items():
        ctx.stats[f"fetch_{key}"] = value
    ctx.write("documents", sorted(documents.values(), key=lambda d: d["doc_id"]))
    ctx.write("fact_documents", pairs)
    ctx.write("fact_images", images)


def invariant(ctx) -> str | None:
    p, s = ctx.params, ctx.stats
    if ctx.rows_in != s["facts_retrieved"] + ctx.rejected:
        return f"facts in {ctx.rows_in} != facts retrieved {s['facts_retrieved']} + rejected {ctx.rejected}"
    if ctx.rows_out("fact_documents") != s["text_pairs"] + s["image_pairs"]:
        return f"fact_documents {ctx.rows_out('fact_documents')} != text hits {s['text_pairs']} + image hits {s['image_pairs']}"
    if s["text_pairs"] + s["image_pairs"] > s["facts_retrieved"] * (p["text_top_k"] + p["image_top_k"]):
        return "a fact has more documents than text_top_k + image_top_k"
    if ctx.rows_out("fact_images") != s["image_pairs"]:
        return f"fact_images {ctx.rows_out('fact_images')} != image hits {s['image_pairs']}"
    return None


STAGE = Stage(
    name="retrieve_fact_documents",
    version=VERSION,
    doc=__doc__,
    inputs={
        "facts": Input("mavis_facts shards: the kept atomic facts (their text is the query)", many=True, table="mavis_facts"),
        "index": Input("the text index shards (build_text_index outputs) over C4", many=True, table="retrieval_text_index"),
        "warcs": Input("WARC files replay mode answers from (instead of fetch.replay_warcs)", many=True, optional=True, kind="file"),
    },
    outputs={
        "documents": Output("mavis_documents", "distinct documents: C4 passages and web images", counted=False),
        "fact_documents": Output("mavis_fact_documents", "(fact, document, rank, query) pairs", counted=False),
        "fact_images": Output("mavis_fact_images", "the image pairs as cache_images' owners table", counted=False),
    },
    params={
        "image_top_k": Param(int, 5, "web images per fact (MAVIS: 5); 0 = no image search", min=0),
        "text_top_k": Param(int, 5, "C4 passages per fact (MAVIS: 5); 0 = no passages", min=0),
        **SEARCH_PARAMS,
        **FETCH_PARAMS,
    },
    run=run,
    invariant=invariant,
    rejects={
        "empty_fact": "the fact has no text",
        "no_documents": "neither the image search nor the text index found anything for the fact",
        "not_in_archive": "replay: the image search for this fact was never recorded",
                "bad_answer": "the search provider's JSON for this fact's query is not its API's shape",
                "http_<status>": "the provider answered this fact's query with a 4xx that concerns it alone (e.g. http_414)",
    },
)

if __name__ == "__main__":
    STAGE.main()
