# M2RAG family (seed m2rag.txt §4.1, App. A): ELI5 queries -> figure 5/6 filters -> figure 7
# topic classification -> release. Model stages get the `llm:` section (with the step's `llm`
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

    rule release_m2rag:
        input:
            stage=stage_code("release_m2rag"),
            queries=expand(rules.classify_queries.output.classified_queries, shard=SHARDS),
            rejects=[rules.harvest_hub_dataset.output.sidecar_rejects]
            + expand(rules.filter_queries.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.classify_queries.output.sidecar_rejects, shard=SHARDS),
        output:
            manifest=f"{RUNDIR}/m2rag/release_m2rag/release.json",
        params:
            io=stage_io,
            version=stage_version("release_m2rag"),
            settings=settings({**M2RAG["release_m2rag"], "categories": M2RAG["categories"], "releases_dir": RELEASES_DIR}),
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
