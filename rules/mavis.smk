# MAVIS family (seed mavis.txt §3.2): pushshift dumps or the live Reddit API -> image posts -> questions (images: rules/images.smk)
# and VQA instances -> filter_visual_dependency (Tables 7-8) -> extract_atomic_facts (Tables 9-10) -> release.
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

    def _llm(overrides):
        """The llm: section with one model's overrides; images resolve in the post image store."""
        return llm_settings(config.get("llm"), overrides, image_store=_POST_IMAGES)

    def _mavis_llm(stage):
        """The stage's section (mavis.<stage>) with its llm overrides merged into the llm: section."""
        section = dict(MAVIS.get(stage, {}))
        if stage == "filter_visual_dependency":
            section["answerers"] = [{**a, "llm": _llm(a.get("llm"))} for a in section.get("answerers", [])]
            section["judge"] = _llm(section.get("judge"))
        else:
            section["llm"] = _llm(section.get("llm"))
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

    rule release_mavis:
        input:
            stage=stage_code("release_mavis"),
            instances=expand(rules.filter_visual_dependency.output.instances, shard=SHARDS),
            questions=expand(run_path("mavis", "filter_questions", "questions", "{shard}"), shard=SHARDS),
            facts=expand(rules.extract_atomic_facts.output.facts, shard=SHARDS),
            rejects=[_HARVESTED.sidecar_rejects]
            + expand(rules.filter_questions.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.filter_visual_dependency.output.sidecar_rejects, shard=SHARDS)
            + expand(rules.extract_atomic_facts.output.sidecar_rejects, shard=SHARDS),
        output:
            manifest=f"{RUNDIR}/mavis/release_mavis/release.json",
        params:
            io=stage_io,
            version=stage_version("release_mavis"),
            settings=settings({**MAVIS["release_mavis"], "releases_dir": RELEASES_DIR}),
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
