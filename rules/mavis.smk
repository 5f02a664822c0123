# MAVIS family (seed mavis.txt §3.2): pushshift dumps -> image posts -> questions (images: rules/images.smk)
# and VQA instances -> release.
MAVIS = config.get("mavis", {})

if MAVIS.get("enabled", False):
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

    rule filter_questions:
        input:
            stage=stage_code("filter_questions"),
            posts=run_path("mavis", "harvest_pushshift", "posts", "{shard}"),
            comments=run_path("mavis", "harvest_pushshift", "comments", "{shard}"),
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

    rule release_mavis:
        input:
            stage=stage_code("release_mavis"),
            instances=expand(run_path("mavis", "filter_questions", "instances", "{shard}"), shard=SHARDS),
            questions=expand(run_path("mavis", "filter_questions", "questions", "{shard}"), shard=SHARDS),
            rejects=[rules.harvest_pushshift.output.sidecar_rejects]
            + expand(rules.filter_questions.output.sidecar_rejects, shard=SHARDS),
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
    CATALOG_TABLES.extend(rules.harvest_pushshift.output.posts + rules.harvest_pushshift.output.comments)
    CATALOG_TABLES.extend(expand(run_path("mavis", "filter_questions", "questions", "{shard}"), shard=SHARDS))
    CATALOG_TABLES.extend(expand(run_path("mavis", "filter_questions", "instances", "{shard}"), shard=SHARDS))
