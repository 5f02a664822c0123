"""search_web: ranked web results for every query (MAVIS §3.2 Step 2 "Collection of multimodal
documents": each atomic fact as a query, the top five images of Google Programmable Search;
M2RAG §4.2.1: the top web pages of Google Search per query, plus auxiliary images from Google
Image Search for the same query).

Input `queries`: a table (Parquet, or JSON lines for a bundled sample) with an id and a text
column (params id_column, text_column). For every query, `page_top_k` page results and
`image_top_k` image results (0 skips that kind) from one provider (stages.core.search: `google`,
`searxng`), paged as the API requires. Every request goes through the fetch layer, so `fetch.mode:
record` keeps them in a WARC file and `replay` rebuilds the table offline. Result lists are cached
by (provider, its settings, kind, query, top_k) under `cache_dir`: read and written in live mode,
written in record mode (which asks again so the WARC holds every answer), unused in replay (which
reads only its WARC, so it reproduces the recorded run exactly).

Output `results` (retrieval_search_results): one row per (query, kind, rank); ids are
`result:<16 hex>` of (query id, kind, url).

Rejects: `null_column`, `bad_value` (a null, empty or non-text id, a null or non-text text: the
runner's contract reasons, stages.core.queries), `empty_query` (blank text), `duplicate_query` (an
id seen before), `no_results` (the provider answered and found nothing of any asked kind),
`http_<status>` (the provider refused this query's request: 414 for a query too long for a url,
400...), `bad_answer` (the provider's JSON for this query is not of its API's shape: a url that is a
number, a title that is an object). A query is kept with every kind it asks for or rejected whole:
its page results are not written when its image search is then rejected. Quota, rate-limit and key errors, an unreachable provider, a
reply that is not JSON and a replay archive missing a request stop the job with one line naming the
provider: never an empty result.
Invariant: queries in = queries with results + rejected.
"""
from __future__ import annotations


from stages.core.fetch import FETCH_PARAMS, Fetcher, stage_fetch_settings
from stages.core.ids import content_id
from stages.core.queries import check_query, read_queries
from stages.core.search import SEARCH_PARAMS, SearchCache, SearchFailed, make_provider
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "2"


def run(ctx) -> None:
    p = ctx.params
    settings = stage_fetch_settings(ctx)
    wanted = [(kind, k) for kind, k in (("page", p["page_top_k"]), ("image", p["image_top_k"])) if k > 0]
    if not wanted:
        raise StageError("page_top_k and image_top_k are both 0: nothing to search for")
    try:
        queries = read_queries(ctx.input_paths("queries"), p["id_column"], p["text_column"])
        provider = make_provider(p["provider"], p["provider_settings"], need_key=settings.mode != "replay")
        # record asks again (the WARC must hold every answer) and refreshes the cache; replay reads only its WARC
        mode = {"replay": "off", "record": "off" if p["cache_mode"] == "off" else "refresh"}.get(settings.mode, p["cache_mode"])
        cache = SearchCache(p["cache_dir"], mode)
        fetcher = Fetcher(settings, record_to=p["record_warc"] or None)
    except (ValueError, SearchFailed) as err:
        raise StageError(str(err)) from None

    writer = ctx.writer("results")
    seen: set[str] = set()
    with fetcher:
        for query_id, text, where in queries:
            with ctx.item(query_id if isinstance(query_id, str) and query_id else where):
                check_query(query_id, text, where, seen, p["id_column"], p["text_column"], "searched")
                rows, counts = [], {}  # written once every kind is answered: a query rejected on its image search keeps no page rows
                for kind, top_k in wanted:
                    hits = cache.get(provider, kind, text, top_k)
                    if hits is None:
                        try:
                            hits = provider.search(fetcher, text, kind, top_k)
                        except SearchFailed as err:
                            raise StageError(f"{err} (query {query_id!r}, {kind} search)") from None
                        cache.put(provider, kind, text, top_k, hits)
                    else:
                        ctx.stats["cache_hits"] += 1
                    counts[kind] = len(hits)
                    rows.extend(
                        {
                            "id": content_id("result", query_id, kind, hit.url), "query_id": query_id, "query": text,
                            "kind": kind, "rank": hit.rank, "url": hit.url, "title": hit.title, "snippet": hit.snippet,
                            "page_url": hit.page_url, "width": hit.width, "height": hit.height, "provider": provider.name,
                        }
                        for hit in hits
                    )
                if not rows:
                    raise Reject("no_results", f"{provider.name} found nothing for {text[:200]!r} ({', '.join(k for k, _ in wanted)})")
                writer.write_many(rows)
                for kind, n in counts.items():
                    ctx.stats[f"{kind}_results"] += n
                ctx.stats["queries_with_results"] += 1
    for key, value in fetcher.stats.items():
        ctx.stats[f"fetch_{key}"] = value


def invariant(ctx) -> str | None:
    answered = ctx.stats["queries_with_results"]
    if ctx.rows_in != answered + ctx.rejected:
        return f"queries in {ctx.rows_in} != queries with results {answered} + rejected {ctx.rejected}"
    return None


STAGE = Stage(
    name="search_web",
    version=VERSION,
    doc=__doc__,
    inputs={
        "queries": Input("queries: Parquet or JSON lines with id_column and text_column", many=True, kind="file"),
        "warcs": Input("WARC files replay mode answers from (instead of fetch.replay_warcs)", many=True, optional=True, kind="file"),
    },
    outputs={"results": Output("retrieval_search_results", "ranked results, one row per (query, kind, rank)", counted=False)},
    params={
        **SEARCH_PARAMS,
        "page_top_k": Param(int, 10, "page results per query (M2RAG: 10); 0 = no page search", min=0),
        "image_top_k": Param(int, 0, "image results per query (MAVIS: 5 per atomic fact); 0 = no image search", min=0),
        "id_column": Param(str, "id", "query id column"),
        "text_column": Param(str, "text", "query text column"),
        **FETCH_PARAMS,
    },
    run=run,
    invariant=invariant,
    rejects={
        "empty_query": "the query has no text",
        "duplicate_query": "a query id seen before (the first row is searched)",
        "no_results": "the provider answered and found nothing of any asked kind",
                "bad_answer": "the search provider's JSON for this query is not its API's shape",
                "http_<status>": "the provider answered this query with a 4xx that concerns it alone (e.g. http_414: the query is too long)",
    },
)

if __name__ == "__main__":
    STAGE.main()
