# Shared retrieval layer (seed mavis.txt §3.2 Step 2, m2rag.txt §4.2.1-4.2.2): search_web -> fetch_pages
# -> split_pages for web pages and images; build_text_index (one job per corpus shard) -> retrieve_text
# for corpus passages. On the config's `retrieval.queries` here; the MAVIS and M2RAG families call the
# same stages on their own queries. Tables join the catalog's `retrieval` schema.
# Names here are prefixed (_retr_): rule files share one namespace and params lambdas read globals late.
RETRIEVAL = config.get("retrieval", {})

if RETRIEVAL.get("enabled", False):
    _retr_fetch_mode = config.get("fetch", {}).get("mode", "live")
    _retr_fetch = {k: v for k, v in config.get("fetch", {}).items() if k != "replay_warcs"}  # replay WARCs are rule inputs
    _retr_replay = {"warcs": RETRIEVAL.get("replay_warcs", [])} if _retr_fetch_mode == "replay" else {}
    _retr_search = RETRIEVAL.get("search_web", {})
    _retr_index = {k: v for k, v in RETRIEVAL.get("build_text_index", {}).items() if k != "corpus"}
    _retr_corpus = {k: v for k, v in RETRIEVAL.get("build_text_index", {}).get("corpus", {}).items() if k != "data_files"}
    RETRIEVAL_INDEX_SHARDS = [f"{i:05d}" for i in range(_retr_index.get("shards", 1))]

    def _retr_record(stage):
        return {"sidecar_warc": f"{RUNDIR}/warc/retrieval/{stage}.warc.gz"} if _retr_fetch_mode == "record" else {}

    rule search_web:
        input:
            stage=stage_code("search_web"),
            queries=RETRIEVAL.get("queries", []),
            **_retr_replay,
        output:
            results=run_path("retrieval", "search_web", "results"),
            **_retr_record("search_web"),
        params:
            io=stage_io,
            version=stage_version("search_web"),
            settings=settings({
                "provider": _retr_search.get("provider", "google"),
                "provider_settings": _retr_search.get(_retr_search.get("provider", "google"), {}),
                **{k: _retr_search[k] for k in ("page_top_k", "image_top_k", "cache_dir", "cache_mode") if k in _retr_search},
                "fetch": _retr_fetch, "record_warc": _retr_record("search_web").get("sidecar_warc", ""),
            }),
        log:
            log_path("retrieval", "search_web"),
        benchmark:
            bench_path("retrieval", "search_web")
        shell:
            stage_shell("search_web")

    rule fetch_pages:
        input:
            stage=stage_code("fetch_pages"),
            results=run_path("retrieval", "search_web", "results"),
            **_retr_replay,
        output:
            pages=run_path("retrieval", "fetch_pages", "pages"),
            **_retr_record("fetch_pages"),
        params:
            io=stage_io,
            version=stage_version("fetch_pages"),
            settings=settings({**RETRIEVAL.get("fetch_pages", {}), "fetch": _retr_fetch, "record_warc": _retr_record("fetch_pages").get("sidecar_warc", "")}),
        log:
            log_path("retrieval", "fetch_pages"),
        benchmark:
            bench_path("retrieval", "fetch_pages")
        shell:
            stage_shell("fetch_pages")

    rule split_pages:
        input:
            stage=stage_code("split_pages"),
            pages=run_path("retrieval", "fetch_pages", "pages"),
        output:
            elements=run_path("retrieval", "split_pages", "elements"),
        params:
            io=stage_io,
            version=stage_version("split_pages"),
            settings=settings(RETRIEVAL.get("split_pages", {})),
        log:
            log_path("retrieval", "split_pages"),
        benchmark:
            bench_path("retrieval", "split_pages")
        shell:
            stage_shell("split_pages")

    rule build_text_index:
        input:
            stage=stage_code("build_text_index"),
            data_files=RETRIEVAL.get("build_text_index", {}).get("corpus", {}).get("data_files", []),
        output:
            index=run_path("retrieval", "build_text_index", "text_index", "{index_shard}"),
        wildcard_constraints:
            index_shard=r"\d{5}",
        params:
            io=stage_io,
            version=stage_version("build_text_index"),
            settings=lambda w: settings({
                "corpus": _retr_corpus, "shard": int(w.index_shard), "shards": len(RETRIEVAL_INDEX_SHARDS),
                **{k: v for k, v in _retr_index.items() if k != "shards"},
            }),
        log:
            log_path("retrieval", "build_text_index", "{index_shard}"),
        benchmark:
            bench_path("retrieval", "build_text_index", "{index_shard}")
        shell:
            stage_shell("build_text_index")

    rule retrieve_text:
        input:
            stage=stage_code("retrieve_text"),
            queries=RETRIEVAL.get("queries", []),
            index=expand(run_path("retrieval", "build_text_index", "text_index", "{index_shard}"), index_shard=RETRIEVAL_INDEX_SHARDS),
        output:
            passages=run_path("retrieval", "retrieve_text", "passages"),
        params:
            io=stage_io,
            version=stage_version("retrieve_text"),
            settings=settings(RETRIEVAL.get("retrieve_text", {})),
        log:
            log_path("retrieval", "retrieve_text"),
        benchmark:
            bench_path("retrieval", "retrieve_text")
        shell:
            stage_shell("retrieve_text")

    CATALOG_TABLES.extend([
        rules.search_web.output.results, rules.fetch_pages.output.pages, rules.split_pages.output.elements,
        *rules.retrieve_text.input.index, rules.retrieve_text.output.passages,
    ])
