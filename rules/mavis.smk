# MAVIS family (seed mavis.txt §3.2): pushshift dumps or the live Reddit API -> image posts -> questions (images: rules/images.smk)
# and VQA instances -> filter_visual_dependency (Tables 7-8) -> extract_atomic_facts (Tables 9-10) -> per-fact documents,
# entailment (App. A.3) and the annotation sample (Step 3) -> release.
MAVIS = config.get("mavis", {})

if MAVIS.get("enabled", False):
    # the raw posts: pushshift dumps (default, the demo) or the live Reddit API (mavis.source: reddit_live)
    HARVEST = "harvest_pushshift" if MAVIS.get("source", "pushshift") == "pushshift" else "harvest_reddit_live"

    if HARVEST == "harvest_pushshift":
        _harvest = {k: v for k, v in MAVIS["harvest_pushshift"].items() if k != "files"}  # dumps are inputs

        rule harvest_pushshift:
            input:
                stage=stage_code("harvest_pushshift"),
                dumps=MAVIS["harvest_pushshift"]["files"],
            output:
                posts=[run_path("mavis", "harvest_pushshift", "posts", s) for s in SHARDS],
                comments=[run_path("mavis", "harvest_pushshift", "comments", s) for s in SHARDS],
                sidecar_rejects=run_path("mavis", "harvest_pushshift", "posts", SHARDS[0]) + ".rejects.parquet",
            params:
                io=stage_io,
                version=stage_version("harvest_pushshift"),
                settings=settings(_harvest),
            threads: 2  # posts here, comments in a reader process (stages/core/forked.py)
            log:
                log_path("mavis", "harvest_pushshift"),
            benchmark:
                bench_path("mavis", "harvest_pushshift")
            shell:
                stage_shell("harvest_pushshift")

        _HARVESTED = rules.harvest_pushshift.output
    else:
        # the Table 11 mapping and the image rules are harvest_pushshift's: one place, the same posts from either source
        _ps = MAVIS.get("harvest_pushshift", {})
        _live = {**{k: _ps[k] for k in ("domains", "image_extensions", "include_nsfw") if k in _ps}, **MAVIS.get("harvest_reddit_live", {})}
        # a replay lists its WARC as an input: a new recording reruns the harvest and what follows
        _live_replay = {"replay": _live["warc"]} if _live.get("mode") == "replay" and _live.get("warc") else {}

        rule harvest_reddit_live:
            input:
                stage=stage_code("harvest_reddit_live"),
                **_live_replay,
            output:
                posts=[run_path("mavis", "harvest_reddit_live", "posts", s) for s in SHARDS],
                comments=[run_path("mavis", "harvest_reddit_live", "comments", s) for s in SHARDS],
                sidecar_rejects=run_path("mavis", "harvest_reddit_live", "posts", SHARDS[0]) + ".rejects.parquet",
            params:
                io=stage_io,
                version=stage_version("harvest_reddit_live"),
                settings=settings(_live),
            log:
                log_path("mavis", "harvest_reddit_live"),
            benchmark:
                bench_path("mavis", "harvest_reddit_live")
            shell:
                stage_shell("harvest_reddit_live")

        _HARVESTED = rules.harvest_reddit_live.output

    rule filter_questions:
        input:
            stage=stage_code("filter_questions"),
            posts=run_path("mavis", HARVEST, "posts", "{shard}"),
            comments=run_path("mavis", HARVEST, "comments", "{shard}"),
        output:
            questions=run_path("mavis", "filter_questions", "questions", "{shard}"),
            instances=run_path("mavis", "filter_questions", "instances", "{shard}"),
            sidecar_rejects=run_path("mavis", "filter_questions", "questions", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("filter_questions"),
            settings=settings(MAVIS["filter_questions"]),
        log:
            log_path("mavis", "filter_questions", "{shard}"),
        benchmark:
            bench_path("mavis", "filter_questions", "{shard}")
        shell:
            stage_shell("filter_questions")

    _POST_IMAGES = config.get("images", {}).get("store", "data/cache/images")

    def _post_image_llm(overrides):
        """The llm: section with one model's overrides; images resolve in the post image store."""
        return llm_settings(config.get("llm"), overrides, image_store=_POST_IMAGES)

    def _mavis_llm(stage):
        """The stage's section (mavis.<stage>) with its llm overrides merged into the llm: section."""
        section = dict(MAVIS.get(stage, {}))
        if stage == "filter_visual_dependency":
            section["answerers"] = [{**a, "llm": _post_image_llm(a.get("llm"))} for a in section.get("answerers", [])]
            section["judge"] = _post_image_llm(section.get("judge"))
        else:
            section["llm"] = _post_image_llm(section.get("llm"))
        return section

    _IMAGES_ON = config.get("images", {}).get("enabled", False)

    def _post_images(wildcards):
        """The posts' kept images (rules/images.smk), shown to a judge that takes images."""
        return [run_path("mavis", "phash_dedup", "images_deduped", wildcards.shard)] if _IMAGES_ON else []

    _VD = _mavis_llm("filter_visual_dependency")
    _AF = _mavis_llm("extract_atomic_facts")

    rule filter_visual_dependency:
        input:
            stage=stage_code("filter_visual_dependency"),
            prompts=prompt_files("mavis_answer_without_image", "mavis_judge_visual"),
            instances=run_path("mavis", "filter_questions", "instances", "{shard}"),
            images=_post_images,
        output:
            instances=run_path("mavis", "filter_visual_dependency", "checked_instances", "{shard}"),
            responses=run_path("mavis", "filter_visual_dependency", "responses", "{shard}"),
            verdicts=run_path("mavis", "filter_visual_dependency", "verdicts", "{shard}"),
            sidecar_rejects=run_path("mavis", "filter_visual_dependency", "checked_instances", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("filter_visual_dependency"),
            settings=settings(_VD),
        resources:
            gpu=max([gpus(a["llm"]) for a in _VD["answerers"]] + [gpus(_VD["judge"])]),
        log:
            log_path("mavis", "filter_visual_dependency", "{shard}"),
        benchmark:
            bench_path("mavis", "filter_visual_dependency", "{shard}")
        shell:
            stage_shell("filter_visual_dependency")

    rule extract_atomic_facts:
        input:
            stage=stage_code("extract_atomic_facts"),
            prompts=prompt_files("mavis_atomic_facts", "mavis_fact_filter"),
            instances=rules.filter_visual_dependency.output.instances,
            images=_post_images,
        output:
            facts=run_path("mavis", "extract_atomic_facts", "facts", "{shard}"),
            sidecar_rejects=run_path("mavis", "extract_atomic_facts", "facts", "{shard}") + ".rejects.parquet",
        params:
            io=stage_io,
            version=stage_version("extract_atomic_facts"),
            settings=settings(_AF),
        resources:
            gpu=gpus(_AF["llm"]),
        log:
            log_path("mavis", "extract_atomic_facts", "{shard}"),
        benchmark:
            bench_path("mavis", "extract_atomic_facts", "{shard}")
        shell:
            stage_shell("extract_atomic_facts")

    # §3.2 Step 2 per-fact documents (needs the retrieval layer: its text index and search settings):
    # retrieve_fact_documents -> the fact images through the shared image stages (fact_cache_images ->
    # fact_filter_images -> fact_phash_dedup, owner = fact) -> entailment scores (App. A.3) -> decide_entailment
    # (thresholds) -> sample_annotation (Step 3, the annotators' sheet) -> release_mavis.
    _RETR = config.get("retrieval", {})
    _DOCS_ON = bool(MAVIS.get("retrieve_fact_documents")) and _RETR.get("enabled", False)

    if _DOCS_ON:
        _IMG = config.get("images", {})
        _IMG_STORE = _IMG.get("store", "data/cache/images")
        _fd_fetch_mode = config.get("fetch", {}).get("mode", "live")
        _fd_fetch = {k: v for k, v in config.get("fetch", {}).items() if k != "replay_warcs"}
        _fd_replay = {"warcs": config.get("fetch", {}).get("replay_warcs", []) + _RETR.get("replay_warcs", [])} if _fd_fetch_mode == "replay" else {}
        _fd_search = _RETR.get("search_web", {})
        _fd_index = [run_path("retrieval", "build_text_index", "text_index", f"{i:05d}")
                     for i in range(_RETR.get("build_text_index", {}).get("shards", 1))]

        def _fd_record(stage):
            return {"sidecar_warc": f"{RUNDIR}/warc/mavis/{stage}.{{shard}}.warc.gz"} if _fd_fetch_mode == "record" else {}

        rule retrieve_fact_documents:
            input:
                stage=stage_code("retrieve_fact_documents"),
                facts=rules.extract_atomic_facts.output.facts,
                index=_fd_index,
                **_fd_replay,
            output:
                documents=run_path("mavis", "retrieve_fact_documents", "documents", "{shard}"),
                fact_documents=run_path("mavis", "retrieve_fact_documents", "fact_documents", "{shard}"),
                fact_images=run_path("mavis", "retrieve_fact_documents", "fact_images", "{shard}"),
                sidecar_rejects=run_path("mavis", "retrieve_fact_documents", "documents", "{shard}") + ".rejects.parquet",
                **_fd_record("retrieve_fact_documents"),
            params:
                io=stage_io,
                version=stage_version("retrieve_fact_documents"),
                settings=lambda w: settings({
                    "provider": _fd_search.get("provider", "google"),
                    "provider_settings": _fd_search.get(_fd_search.get("provider", "google"), {}),
                    **{k: _fd_search[k] for k in ("cache_dir", "cache_mode") if k in _fd_search},
                    **MAVIS["retrieve_fact_documents"], "fetch": _fd_fetch,
                    "record_warc": _fd_record("retrieve_fact_documents").get("sidecar_warc", "").format(shard=w.shard),
                }),
            log:
                log_path("mavis", "retrieve_fact_documents", "{shard}"),
            benchmark:
                bench_path("mavis", "retrieve_fact_documents", "{shard}")
            shell:
                stage_shell("retrieve_fact_documents")

        rule fact_cache_images:
            input:
                stage=stage_code("cache_images"),
                owners=rules.retrieve_fact_documents.output.fact_images,
                **_fd_replay,
            output:
                images=run_path("mavis", "fact_cache_images", "images_cached", "{shard}"),
                sidecar_rejects=run_path("mavis", "fact_cache_images", "images_cached", "{shard}") + ".rejects.parquet",
                **_fd_record("fact_cache_images"),
            params:
                io=stage_io,
                version=stage_version("cache_images"),
                settings=lambda w: settings({
                    "owner_column": "fact_id", "url_column": "url", "store": _IMG_STORE, "fetch": _fd_fetch,
                    **_IMG.get("cache_images", {}),
                    "record_warc": _fd_record("fact_cache_images").get("sidecar_warc", "").format(shard=w.shard),
                }),
            log:
                log_path("mavis", "fact_cache_images", "{shard}"),
            benchmark:
                bench_path("mavis", "fact_cache_images", "{shard}")
            shell:
                stage_shell("cache_images")

        # M2RAG's image filters (size, CLIP, pHash) on the fact images: an option, off by default
        # (MAVIS filters the documents by entailment only, §3.2 Step 2, App. A.3)
        _FACT_FILTERS = MAVIS.get("fact_image_filters", False)
        if _FACT_FILTERS:
            rule fact_filter_images:
                input:
                    stage=stage_code("filter_images"),
                    images=rules.fact_cache_images.output.images,
                    texts=rules.retrieve_fact_documents.output.fact_images,
                output:
                    images=run_path("mavis", "fact_filter_images", "images_filtered", "{shard}"),
                    sidecar_rejects=run_path("mavis", "fact_filter_images", "images_filtered", "{shard}") + ".rejects.parquet",
                params:
                    io=stage_io,
                    version=stage_version("filter_images"),
                    settings=settings({"store": _IMG_STORE, "text_key": "owner_id", "text_id_column": "fact_id", "text_column": "text",
                                       **_IMG.get("filter_images", {})}),
                resources:
                    gpu=int(_IMG.get("filter_images", {}).get("device") == "cuda"),
                log:
                    log_path("mavis", "fact_filter_images", "{shard}"),
                benchmark:
                    bench_path("mavis", "fact_filter_images", "{shard}")
                shell:
                    stage_shell("filter_images")

            rule fact_phash_dedup:
                input:
                    stage=stage_code("phash_dedup"),
                    images=rules.fact_filter_images.output.images,
                output:
                    images=run_path("mavis", "fact_phash_dedup", "images_deduped", "{shard}"),
                    sidecar_rejects=run_path("mavis", "fact_phash_dedup", "images_deduped", "{shard}") + ".rejects.parquet",
                params:
                    io=stage_io,
                    version=stage_version("phash_dedup"),
                    settings=settings({"store": _IMG_STORE, **_IMG.get("phash_dedup", {}), "scope": "owner"}),  # near-duplicates per fact
                log:
                    log_path("mavis", "fact_phash_dedup", "{shard}"),
                benchmark:
                    bench_path("mavis", "fact_phash_dedup", "{shard}")
                shell:
                    stage_shell("phash_dedup")

        _FACT_IMAGES = (rules.fact_phash_dedup.output.images if _FACT_FILTERS
                        else rules.fact_cache_images.output.images)

        _ET = _mavis_llm("filter_entailment_text")
        _EI = _mavis_llm("filter_entailment_image")
        _FD_OUT = rules.retrieve_fact_documents.output

        rule filter_entailment_text:
            input:
                stage=stage_code("filter_entailment_text"),
                prompts=prompt_files("mavis_entail_text"),
                facts=rules.extract_atomic_facts.output.facts,
                documents=_FD_OUT.documents,
                fact_documents=_FD_OUT.fact_documents,
            output:
                scores=run_path("mavis", "filter_entailment_text", "scores", "{shard}"),
                sidecar_rejects=run_path("mavis", "filter_entailment_text", "scores", "{shard}") + ".rejects.parquet",
            params:
                io=stage_io,
                version=stage_version("filter_entailment_text"),
                settings=settings(_ET),
            resources:
                gpu=gpus(_ET["llm"]),
            log:
                log_path("mavis", "filter_entailment_text", "{shard}"),
            benchmark:
                bench_path("mavis", "filter_entailment_text", "{shard}")
            shell:
                stage_shell("filter_entailment_text")

        rule filter_entailment_image:
            input:
                stage=stage_code("filter_entailment_image"),
                prompts=prompt_files("mavis_entail_image"),
                facts=rules.extract_atomic_facts.output.facts,
                documents=_FD_OUT.documents,
                fact_documents=_FD_OUT.fact_documents,
                images=_FACT_IMAGES,
            output:
                scores=run_path("mavis", "filter_entailment_image", "scores", "{shard}"),
                sidecar_rejects=run_path("mavis", "filter_entailment_image", "scores", "{shard}") + ".rejects.parquet",
            params:
                io=stage_io,
                version=stage_version("filter_entailment_image"),
                settings=settings(_EI),
            resources:
                gpu=gpus(_EI["llm"]),
            log:
                log_path("mavis", "filter_entailment_image", "{shard}"),
            benchmark:
                bench_path("mavis", "filter_entailment_image", "{shard}")
            shell:
                stage_shell("filter_entailment_image")

        rule decide_entailment:
            input:
                stage=stage_code("decide_entailment"),
                fact_documents=_FD_OUT.fact_documents,
                scores=[rules.filter_entailment_text.output.scores, rules.filter_entailment_image.output.scores],
            output:
                judged=run_path("mavis", "decide_entailment", "judged", "{shard}"),
                sidecar_rejects=run_path("mavis", "decide_entailment", "judged", "{shard}") + ".rejects.parquet",
            params:
                io=stage_io,
                version=stage_version("decide_entailment"),
                settings=settings(MAVIS.get("decide_entailment", {})),
            log:
                log_path("mavis", "decide_entailment", "{shard}"),
            benchmark:
                bench_path("mavis", "decide_entailment", "{shard}")
            shell:
                stage_shell("decide_entailment")

        rule sample_annotation:
            input:
                stage=stage_code("sample_annotation"),
                instances=expand(rules.filter_visual_dependency.output.instances, shard=SHARDS),
                facts=expand(rules.extract_atomic_facts.output.facts, shard=SHARDS),
                judged=expand(rules.decide_entailment.output.judged, shard=SHARDS),
                documents=expand(_FD_OUT.documents, shard=SHARDS),
            output:
                sample=run_path("mavis", "sample_annotation", "annotation_sample"),
                sheet=f"{RUNDIR}/mavis/sample_annotation/annotation_sheet.csv",
            params:
                io=stage_io,
                version=stage_version("sample_annotation"),
                settings=settings(MAVIS.get("sample_annotation", {})),
            log:
                log_path("mavis", "sample_annotation"),
            benchmark:
                bench_path("mavis", "sample_annotation")
            shell:
                stage_shell("sample_annotation")

    def _release_docs(stage_output):
        return expand(stage_output, shard=SHARDS) if _DOCS_ON else []

    # every upstream per-shard stage whose rejects the release counts: (stage folder, first output table)
    _REJECTING = ([("cache_images", "images_cached"), ("filter_images", "images_filtered"), ("phash_dedup", "images_deduped")]
                  if _IMAGES_ON else []) + ([
        ("retrieve_fact_documents", "documents"), ("fact_cache_images", "images_cached")]
        + ([("fact_filter_images", "images_filtered"), ("fact_phash_dedup", "images_deduped")] if _FACT_FILTERS else [])
        + [("filter_entailment_text", "scores"), ("filter_entailment_image", "scores"), ("decide_entailment", "judged")] if _DOCS_ON else [])

    rule release_mavis:
        input:
            stage=stage_code("release_mavis"),
            instances=expand(rules.filter_visual_dependency.output.instances, shard=SHARDS),
            questions=expand(run_path("mavis", "filter_questions", "questions", "{shard}"), shard=SHARDS),
            facts=expand(rules.extract_atomic_facts.output.facts, shard=SHARDS),
            documents=_release_docs(run_path("mavis", "retrieve_fact_documents", "documents", "{shard}")),
            judged=_release_docs(run_path("mavis", "decide_entailment", "judged", "{shard}")),
            question_images=expand(run_path("mavis", "phash_dedup", "images_deduped", "{shard}"), shard=SHARDS) if _IMAGES_ON else [],
            document_images=_release_docs(_FACT_IMAGES) if _DOCS_ON else [],
            annotations=[MAVIS["annotations"]] if MAVIS.get("annotations") else [],
            rejects=[_HARVESTED.sidecar_rejects]
            + expand(rules.filter_questions.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.filter_visual_dependency.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.extract_atomic_facts.output.sidecar_rejects, shard=SHARDS)
            + [run_path("mavis", s, t, sh) + ".rejects.parquet" for s, t in _REJECTING for sh in SHARDS],
        output:
            manifest=f"{RUNDIR}/mavis/release_mavis/release.json",
        params:
            io=stage_io,
            version=stage_version("release_mavis"),
            settings=settings({**MAVIS["release_mavis"], "releases_dir": RELEASES_DIR, "image_store": _POST_IMAGES,
                               "docs_per_fact": MAVIS.get("sample_annotation", {}).get("docs_per_fact", 3)}),
        log:
            log_path("mavis", "release_mavis"),
        benchmark:
            bench_path("mavis", "release_mavis")
        shell:
            stage_shell("release_mavis")

    RELEASES.append(rules.release_mavis.output.manifest)
    CATALOG_TABLES.extend(_HARVESTED.posts + _HARVESTED.comments)
    CATALOG_TABLES.extend(expand(run_path("mavis", "filter_questions", "questions", "{shard}"), shard=SHARDS))
    CATALOG_TABLES.extend(expand(run_path("mavis", "filter_questions", "instances", "{shard}"), shard=SHARDS))
    _VD_OUT = rules.filter_visual_dependency.output
    for _table in (_VD_OUT.instances, _VD_OUT.responses, _VD_OUT.verdicts, rules.extract_atomic_facts.output.facts):
        CATALOG_TABLES.extend(expand(_table, shard=SHARDS))
    if _DOCS_ON:
        _FILTERED = (rules.fact_filter_images.output.images, rules.fact_phash_dedup.output.images) if _FACT_FILTERS else ()
        for _rule_out in (_FD_OUT.documents, _FD_OUT.fact_documents, rules.fact_cache_images.output.images, *_FILTERED,
                          rules.filter_entailment_text.output.scores,
                          rules.filter_entailment_image.output.scores, rules.decide_entailment.output.judged):
            CATALOG_TABLES.extend(expand(_rule_out, shard=SHARDS))
        CATALOG_TABLES.append(rules.sample_annotation.output.sample)  # the release target also writes the annotators' sheet
