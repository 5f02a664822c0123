# M2RAG family (seed m2rag.txt §4.1-4.3, App. A-B): ELI5 queries -> figure 5/6 filters -> figure 7
# topic classification -> the per-topic sample -> web pages (the shared retrieval stages search_web,
# fetch_pages, split_pages, run here on the sampled queries with the `retrieval:` section's provider,
# fetch, page and split settings) -> the page images and the auxiliary images of image search through
# the shared image stages (cache_images -> filter_images -> phash_dedup, run here per query) ->
# captions (§5.2) -> figure 8 text scores and figure 9 image scores (two rules of score_elements, so
# editing one prompt reruns one scorer) -> release. Model stages get the `llm:` section (with the step's `llm`
# overrides merged in) and list their prompt and answer-schema files as inputs, so editing a prompt
# reruns exactly the rules that use it and their descendants.
M2RAG = config.get("m2rag", {})


def m2rag_llm(stage):
    return llm_settings(config.get("llm"), M2RAG.get(stage, {}).get("llm"))


if M2RAG.get("enabled", False):
    _hub = {k: v for k, v in M2RAG["harvest_hub_dataset"].items() if k != "data_files"}  # data files are inputs

    rule harvest_hub_dataset:
        input:
            stage=stage_code("harvest_hub_dataset"),
            data_files=M2RAG["harvest_hub_dataset"].get("data_files", []),
        output:
            queries=[run_path("m2rag", "harvest_hub_dataset", "queries", s) for s in SHARDS],
            sidecar_rejects=run_path("m2rag", "harvest_hub_dataset", "queries", SHARDS[0]) + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("harvest_hub_dataset"),
            settings=settings(_hub),
        log:
            log_path("m2rag", "harvest_hub_dataset"),
        benchmark:
            bench_path("m2rag", "harvest_hub_dataset")
        shell:
            stage_shell("harvest_hub_dataset")

    rule filter_queries:
        input:
            stage=stage_code("filter_queries"),
            prompts=prompt_files("m2rag_query_clear", "m2rag_query_images"),
            queries=run_path("m2rag", "harvest_hub_dataset", "queries", "{shard}"),
        output:
            filtered_queries=run_path("m2rag", "filter_queries", "filtered_queries", "{shard}"),
            sidecar_rejects=run_path("m2rag", "filter_queries", "filtered_queries", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("filter_queries"),
            settings=settings({**M2RAG.get("filter_queries", {}), "llm": m2rag_llm("filter_queries")}),
        resources:
            gpu=gpus(m2rag_llm("filter_queries")),
        log:
            log_path("m2rag", "filter_queries", "{shard}"),
        benchmark:
            bench_path("m2rag", "filter_queries", "{shard}")
        shell:
            stage_shell("filter_queries")

    rule classify_queries:
        input:
            stage=stage_code("classify_queries"),
            prompts=prompt_files("m2rag_query_classify"),
            filtered_queries=run_path("m2rag", "filter_queries", "filtered_queries", "{shard}"),
        output:
            classified_queries=run_path("m2rag", "classify_queries", "classified_queries", "{shard}"),
            sidecar_rejects=run_path("m2rag", "classify_queries", "classified_queries", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("classify_queries"),
            settings=settings({**M2RAG.get("classify_queries", {}), "categories": M2RAG["categories"], "llm": m2rag_llm("classify_queries")}),
        resources:
            gpu=gpus(m2rag_llm("classify_queries")),
        log:
            log_path("m2rag", "classify_queries", "{shard}"),
        benchmark:
            bench_path("m2rag", "classify_queries", "{shard}")
        shell:
            stage_shell("classify_queries")

    rule sample_queries:
        input:
            stage=stage_code("sample_queries"),
            classified_queries=expand(rules.classify_queries.output.classified_queries, shard=SHARDS),
        output:
            sampled_queries=run_path("m2rag", "sample_queries", "sampled_queries"),
        params:
            io=stage_io,
            version=stage_version("sample_queries"),
            settings=settings(M2RAG.get("sample_queries", {})),
        log:
            log_path("m2rag", "sample_queries"),
        benchmark:
            bench_path("m2rag", "sample_queries")
        shell:
            stage_shell("sample_queries")

    # the retrieval stages on the sampled queries (rule names prefixed; the stages are the shared ones)
    _m2_retr = config.get("retrieval", {})
    _m2_fetch_mode = config.get("fetch", {}).get("mode", "live")
    _m2_fetch = {k: v for k, v in config.get("fetch", {}).items() if k != "replay_warcs"}
    _m2_replay = {"warcs": _m2_retr.get("replay_warcs", [])} if _m2_fetch_mode == "replay" else {}
    _m2_search = _m2_retr.get("search_web", {})

    def _m2_record(stage):
        return {"sidecar_warc": f"{RUNDIR}/warc/m2rag/{stage}.warc.gz"} if _m2_fetch_mode == "record" else {}

    rule m2rag_search_web:
        input:
            stage=stage_code("search_web"),
            queries=rules.sample_queries.output.sampled_queries,
            **_m2_replay,
        output:
            results=run_path("m2rag", "search_web", "results"),
            sidecar_rejects=run_path("m2rag", "search_web", "results") + ".rejects.parquet",
            **_m2_record("search_web"),
        params:
            io=stage_io,
            version=stage_version("search_web"),
            settings=settings({
                "provider": _m2_search.get("provider", "google"),
                "provider_settings": _m2_search.get(_m2_search.get("provider", "google"), {}),
                **{k: _m2_search[k] for k in ("cache_dir", "cache_mode") if k in _m2_search},
                **M2RAG.get("search_web", {}), "id_column": "id", "text_column": "question",
                "fetch": _m2_fetch, "record_warc": _m2_record("search_web").get("sidecar_warc", ""),
            }),
        log:
            log_path("m2rag", "search_web"),
        benchmark:
            bench_path("m2rag", "search_web")
        shell:
            stage_shell("search_web")

    rule m2rag_fetch_pages:
        input:
            stage=stage_code("fetch_pages"),
            results=rules.m2rag_search_web.output.results,
            **_m2_replay,
        output:
            pages=run_path("m2rag", "fetch_pages", "pages"),
            sidecar_rejects=run_path("m2rag", "fetch_pages", "pages") + ".rejects.parquet",
            **_m2_record("fetch_pages"),
        params:
            io=stage_io,
            version=stage_version("fetch_pages"),
            settings=settings({**_m2_retr.get("fetch_pages", {}), "fetch": _m2_fetch, "record_warc": _m2_record("fetch_pages").get("sidecar_warc", "")}),
        log:
            log_path("m2rag", "fetch_pages"),
        benchmark:
            bench_path("m2rag", "fetch_pages")
        shell:
            stage_shell("fetch_pages")

    rule m2rag_split_pages:
        input:
            stage=stage_code("split_pages"),
            pages=rules.m2rag_fetch_pages.output.pages,
        output:
            elements=run_path("m2rag", "split_pages", "elements"),
            sidecar_rejects=run_path("m2rag", "split_pages", "elements") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("split_pages"),
            settings=settings(_m2_retr.get("split_pages", {})),
        log:
            log_path("m2rag", "split_pages"),
        benchmark:
            bench_path("m2rag", "split_pages")
        shell:
            stage_shell("split_pages")

    # §4.2.3 on the page images and the auxiliary images (image search, m2rag.search_web.image_top_k):
    # the shared image stages under their own rules, with the images: section's settings and the
    # m2rag section's overrides; pHash duplicates compete per query.
    _m2_images = config.get("images", {})
    _m2_store = _m2_images.get("store", "data/cache/images")
    _m2_placeholder = _m2_retr.get("split_pages", {}).get("placeholder", "<image_{n}>")

    rule m2rag_gather_images:
        input:
            stage=stage_code("gather_images"),
            elements=rules.m2rag_split_pages.output.elements,
            results=rules.m2rag_search_web.output.results,
        output:
            refs=run_path("m2rag", "gather_images", "refs"),
            sidecar_rejects=run_path("m2rag", "gather_images", "refs") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("gather_images"),
            settings=lambda w: settings({**M2RAG.get("gather_images", {}), "placeholder": _m2_placeholder}),
        log:
            log_path("m2rag", "gather_images"),
        benchmark:
            bench_path("m2rag", "gather_images")
        shell:
            stage_shell("gather_images")

    rule m2rag_cache_images:
        input:
            stage=stage_code("cache_images"),
            owners=rules.m2rag_gather_images.output.refs,
            **_m2_replay,
        output:
            images=run_path("m2rag", "cache_images", "images_cached"),
            sidecar_rejects=run_path("m2rag", "cache_images", "images_cached") + ".rejects.parquet",
            **_m2_record("cache_images"),
        params:
            io=stage_io,
            version=stage_version("cache_images"),
            settings=settings({
                **_m2_images.get("cache_images", {}), **M2RAG.get("cache_images", {}),
                "owner_column": "owner_id", "url_column": "url", "query_column": "query_id", "store": _m2_store,
                "fetch": _m2_fetch, "record_warc": _m2_record("cache_images").get("sidecar_warc", ""),
            }),
        log:
            log_path("m2rag", "cache_images"),
        benchmark:
            bench_path("m2rag", "cache_images")
        shell:
            stage_shell("cache_images")

    _m2_filter = {**_m2_images.get("filter_images", {}), **M2RAG.get("filter_images", {})}

    rule m2rag_filter_images:
        input:
            stage=stage_code("filter_images"),
            images=rules.m2rag_cache_images.output.images,
            texts=rules.sample_queries.output.sampled_queries,
        output:
            images=run_path("m2rag", "filter_images", "images_filtered"),
            sidecar_rejects=run_path("m2rag", "filter_images", "images_filtered") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("filter_images"),
            settings=settings({**_m2_filter, "store": _m2_store, "text_key": "query_id", "text_id_column": "id", "text_column": "question"}),
        resources:
            gpu=int(_m2_filter.get("device") == "cuda"),
        log:
            log_path("m2rag", "filter_images"),
        benchmark:
            bench_path("m2rag", "filter_images")
        shell:
            stage_shell("filter_images")

    rule m2rag_phash_dedup:
        input:
            stage=stage_code("phash_dedup"),
            images=rules.m2rag_filter_images.output.images,
        output:
            images=run_path("m2rag", "phash_dedup", "images_deduped"),
            sidecar_rejects=run_path("m2rag", "phash_dedup", "images_deduped") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("phash_dedup"),
            settings=settings({**_m2_images.get("phash_dedup", {}), **M2RAG.get("phash_dedup", {}), "store": _m2_store, "scope": "query"}),
        log:
            log_path("m2rag", "phash_dedup"),
        benchmark:
            bench_path("m2rag", "phash_dedup")
        shell:
            stage_shell("phash_dedup")

    rule caption_images:
        input:
            stage=stage_code("caption_images"),
            prompts=prompt_files("m2rag_caption_image"),
            images=rules.m2rag_phash_dedup.output.images,
            refs=rules.m2rag_gather_images.output.refs,
        output:
            captions=run_path("m2rag", "caption_images", "captions"),
            sidecar_rejects=run_path("m2rag", "caption_images", "captions") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("caption_images"),
            settings=settings({**M2RAG.get("caption_images", {}), "llm": llm_settings(config.get("llm"), M2RAG.get("caption_images", {}).get("llm"), image_store=_m2_store)}),
        resources:
            gpu=gpus(m2rag_llm("caption_images")),
        log:
            log_path("m2rag", "caption_images"),
        benchmark:
            bench_path("m2rag", "caption_images")
        shell:
            stage_shell("caption_images")

    def _m2_score(kind):
        section = M2RAG.get("score_elements", {})
        return settings({
            **{k: v for k, v in section.items() if k not in ("llm", "vision_llm")}, "kinds": [kind],
            "llm": llm_settings(config.get("llm"), section.get("llm"), image_store=_m2_store),
            "vision_llm": section.get("vision_llm", {}), "placeholder": _m2_placeholder,
        })

    # figure 8: the text pieces. Two rules run score_elements, each in a folder named after the rule;
    # the catalog's m2rag.scored_elements view unions both.
    rule text_score_elements:
        input:
            stage=stage_code("score_elements"),
            prompts=prompt_files("m2rag_score_text"),
            elements=rules.m2rag_split_pages.output.elements,
            queries=rules.sample_queries.output.sampled_queries,
        output:
            scored_elements=run_path("m2rag", "text_score_elements", "scored_elements"),
            sidecar_rejects=run_path("m2rag", "text_score_elements", "scored_elements") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("score_elements"),
            settings=lambda w: _m2_score("text"),  # a function: the placeholder's {n} is not a wildcard
        resources:
            gpu=gpus(m2rag_llm("score_elements")),
        log:
            log_path("m2rag", "text_score_elements"),
        benchmark:
            bench_path("m2rag", "text_score_elements")
        shell:
            stage_shell("score_elements")

    # figure 9: the kept page images and auxiliary images
    rule image_score_elements:
        input:
            stage=stage_code("score_elements"),
            prompts=prompt_files("m2rag_score_image"),
            elements=rules.m2rag_split_pages.output.elements,
            queries=rules.sample_queries.output.sampled_queries,
            images=rules.m2rag_phash_dedup.output.images,
            refs=rules.m2rag_gather_images.output.refs,
        output:
            scored_elements=run_path("m2rag", "image_score_elements", "scored_elements"),
            sidecar_rejects=run_path("m2rag", "image_score_elements", "scored_elements") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("score_elements"),
            settings=lambda w: _m2_score("image"),
        resources:
            gpu=gpus(llm_settings(config.get("llm"), M2RAG.get("score_elements", {}).get("llm"), M2RAG.get("score_elements", {}).get("vision_llm"))),
        log:
            log_path("m2rag", "image_score_elements"),
        benchmark:
            bench_path("m2rag", "image_score_elements")
        shell:
            stage_shell("score_elements")

    rule release_m2rag:
        input:
            stage=stage_code("release_m2rag"),
            queries=expand(rules.classify_queries.output.classified_queries, shard=SHARDS),
            sampled=rules.sample_queries.output.sampled_queries,
            pages=rules.m2rag_fetch_pages.output.pages,
            elements=[rules.text_score_elements.output.scored_elements, rules.image_score_elements.output.scored_elements],
            captions=rules.caption_images.output.captions,
            rejects=[rules.harvest_hub_dataset.output.sidecar_rejects]
            + expand(rules.filter_queries.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.classify_queries.output.sidecar_rejects, shard=SHARDS)
            + [rules.m2rag_search_web.output.sidecar_rejects, rules.m2rag_fetch_pages.output.sidecar_rejects,
               rules.m2rag_split_pages.output.sidecar_rejects, rules.m2rag_cache_images.output.sidecar_rejects,
               rules.m2rag_filter_images.output.sidecar_rejects, rules.m2rag_phash_dedup.output.sidecar_rejects,
               rules.caption_images.output.sidecar_rejects, rules.text_score_elements.output.sidecar_rejects,
               rules.image_score_elements.output.sidecar_rejects],
        output:
            manifest=f"{RUNDIR}/m2rag/release_m2rag/release.json",
        params:
            io=stage_io,
            version=stage_version("release_m2rag"),
            settings=settings({**M2RAG["release_m2rag"], "categories": M2RAG["categories"], "releases_dir": RELEASES_DIR, "image_store": _m2_store}),
        log:
            log_path("m2rag", "release_m2rag"),
        benchmark:
            bench_path("m2rag", "release_m2rag")
        shell:
            stage_shell("release_m2rag")

    RELEASES.append(rules.release_m2rag.output.manifest)
    CATALOG_TABLES.extend(rules.harvest_hub_dataset.output.queries)
    CATALOG_TABLES.extend(expand(rules.filter_queries.output.filtered_queries, shard=SHARDS))
    CATALOG_TABLES.extend(expand(rules.classify_queries.output.classified_queries, shard=SHARDS))
    CATALOG_TABLES.extend([rules.sample_queries.output.sampled_queries, rules.m2rag_search_web.output.results, rules.m2rag_fetch_pages.output.pages,
                           rules.m2rag_split_pages.output.elements, rules.m2rag_gather_images.output.refs,
                           rules.m2rag_cache_images.output.images, rules.m2rag_filter_images.output.images,
                           rules.m2rag_phash_dedup.output.images, rules.caption_images.output.captions,
                           rules.text_score_elements.output.scored_elements, rules.image_score_elements.output.scored_elements])
