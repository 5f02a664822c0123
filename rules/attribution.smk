# Attribution while generating (seed cite-while-you-generate.txt §3-4, Algorithm 1, App. C-E), part
# of the `evaluate` target: items JSONL | CliConSummation sheets | MIMIC-CXR reports (§4.1, App. B)
# -> attribution_inputs -> generate_attributed (transformers, pooled attention per generated token)
# -> attribute_attention (Algorithm 1) | attribute_embedding (MiniLM + CLIP) | attribute_self (the
# summariser asked, App. E) ; attribution_references (file gold + judge silver) -> score_attribution
# (Table 2-3 metrics, report.md).
AT = config.get("attribution", {})

if AT.get("enabled", False):
    def _at(stage, table):
        return run_path("attribution", stage, table)

    def _at_log(stage):
        return log_path("attribution", stage)

    def _at_bench(stage):
        return bench_path("attribution", stage)

    _AT_GEN = AT.get("generate_attributed", {})
    _AT_SOURCES = {name: AT[key] for name, key in (("jsonl", "items"), ("cliconsummation", "cliconsummation"), ("mimic_cxr", "mimic_cxr"))
                   if AT.get(key)}
    if not _AT_SOURCES:
        sys.exit("invalid config:\n  attribution: name the items to summarise: items (a JSONL), cliconsummation or mimic_cxr (folders)")

    rule attribution_inputs:
        input:
            stage=stage_code("attribution_inputs"),
            **_AT_SOURCES,  # the project's JSONL and the seed's datasets from their local folders
        output:
            source_items=_at("attribution_inputs", "items"),
        params:
            io=stage_io,
            version=stage_version("attribution_inputs"),
            settings=settings(AT.get("attribution_inputs", {})),
        log:
            _at_log("attribution_inputs"),
        benchmark:
            _at_bench("attribution_inputs")
        shell:
            stage_shell("attribution_inputs")

    rule generate_attributed:
        input:
            stage=stage_code("generate_attributed"),
            prompts=prompt_files("attribution_summarize", "attribution_caption"),
            source_items=rules.attribution_inputs.output.source_items,
        output:
            generations=_at("generate_attributed", "generations"),
        params:
            io=stage_io,
            version=stage_version("generate_attributed"),
            settings=settings(_AT_GEN),
        resources:
            gpu=1 if str(_AT_GEN.get("device", "auto")).startswith("cuda") else 0,
        log:
            _at_log("generate_attributed"),
        benchmark:
            _at_bench("generate_attributed")
        shell:
            stage_shell("generate_attributed")

    rule attribute_attention:
        input:
            stage=stage_code("attribute_attention"),
            generations=rules.generate_attributed.output.generations,
        output:
            citations=_at("attribute_attention", "citations"),
        params:
            io=stage_io,
            version=stage_version("attribute_attention"),
            settings=settings(AT.get("attribute_attention", {})),
        log:
            _at_log("attribute_attention"),
        benchmark:
            _at_bench("attribute_attention")
        shell:
            stage_shell("attribute_attention")

    rule attribute_embedding:
        input:
            stage=stage_code("attribute_embedding"),
            generations=rules.generate_attributed.output.generations,
            source_items=rules.attribution_inputs.output.source_items,
        output:
            citations=_at("attribute_embedding", "citations"),
        params:
            io=stage_io,
            version=stage_version("attribute_embedding"),
            settings=settings(AT.get("attribute_embedding", {})),
        log:
            _at_log("attribute_embedding"),
        benchmark:
            _at_bench("attribute_embedding")
        shell:
            stage_shell("attribute_embedding")

    _AT_SELF = {**AT.get("attribute_self", {}), "llm": llm_settings(config.get("llm"), AT.get("attribute_self", {}).get("llm"))}

    rule attribute_self:
        input:
            stage=stage_code("attribute_self"),
            prompts=prompt_files("attribution_cite"),
            generations=rules.generate_attributed.output.generations,
            source_items=rules.attribution_inputs.output.source_items,
        output:
            citations=_at("attribute_self", "citations"),
        params:
            io=stage_io,
            version=stage_version("attribute_self"),
            settings=settings(_AT_SELF),
        resources:
            gpu=gpus(_AT_SELF["llm"]),
        log:
            _at_log("attribute_self"),
        benchmark:
            _at_bench("attribute_self")
        shell:
            stage_shell("attribute_self")

    _AT_REFS = {**AT.get("attribution_references", {}),
                "llm": llm_settings(config.get("llm"), AT.get("attribution_references", {}).get("llm"))}

    rule attribution_references:
        input:
            stage=stage_code("attribution_references"),
            prompts=prompt_files("attribution_cite"),
            generations=rules.generate_attributed.output.generations,
            source_items=rules.attribution_inputs.output.source_items,
        output:
            references=_at("attribution_references", "references"),
        params:
            io=stage_io,
            version=stage_version("attribution_references"),
            settings=settings(_AT_REFS),
        resources:
            gpu=gpus(_AT_REFS["llm"]),
        log:
            _at_log("attribution_references"),
        benchmark:
            _at_bench("attribution_references")
        shell:
            stage_shell("attribution_references")

    rule score_attribution:
        input:
            stage=stage_code("score_attribution"),
            citations=[rules.attribute_attention.output.citations, rules.attribute_embedding.output.citations,
                       rules.attribute_self.output.citations],
            references=rules.attribution_references.output.references,
            generations=rules.generate_attributed.output.generations,
            source_items=rules.attribution_inputs.output.source_items,
        output:
            scores=_at("score_attribution", "scores"),
            summary=_at("score_attribution", "summary"),
            report=report(f"{RUNDIR}/attribution/score_attribution/report.md", category="attribution", subcategory="evaluation"),
        params:
            io=stage_io,
            version=stage_version("score_attribution"),
            settings=settings({}),
        log:
            _at_log("score_attribution"),
        benchmark:
            _at_bench("score_attribution")
        shell:
            stage_shell("score_attribution")

    EVALUATIONS.append(rules.score_attribution.output.report)

    # MCiteBench's attention analyses (mcitebench.txt §5.3 Figures 6-7) on the MCiteBench evaluation's
    # responses of its first model, with the same capture; off unless attribution.mcitebench_attention.enabled.
    _AT_MCB = dict(AT.get("mcitebench_attention") or {})
    if _AT_MCB.pop("enabled", False) and config.get("evaluate", {}).get("enabled", False):
        rule mcitebench_attention:
            input:
                stage=stage_code("mcitebench_attention"),
                prompts=prompt_files("mcitebench_attention", "mcitebench_answer"),
                responses=run_path("eval_mcitebench", "generate_answers", "responses", "00000"),
            output:
                modality=_at("mcitebench_attention", "modality"),
                figure_map=_at("mcitebench_attention", "figure_map"),
                report=report(f"{RUNDIR}/attribution/mcitebench_attention/report.md", category="mcitebench", subcategory="attention"),
                plot_modality=report(f"{RUNDIR}/attribution/mcitebench_attention/figure6.png", category="mcitebench", subcategory="attention"),
                plot_map=report(f"{RUNDIR}/attribution/mcitebench_attention/figure7.png", category="mcitebench", subcategory="attention"),
            params:
                io=stage_io,
                version=stage_version("mcitebench_attention"),
                settings=settings(_AT_MCB),
            resources:
                gpu=1 if str(_AT_MCB.get("device", "auto")).startswith("cuda") else 0,
            log:
                _at_log("mcitebench_attention"),
            benchmark:
                _at_bench("mcitebench_attention")
            shell:
                stage_shell("mcitebench_attention")

        EVALUATIONS.append(rules.mcitebench_attention.output.report)
        EVAL_TABLES.extend([rules.mcitebench_attention.output.modality, rules.mcitebench_attention.output.figure_map])
    # EVAL_TABLES, not CATALOG_TABLES: the default `release` target must not run an evaluation
    EVAL_TABLES.extend([rules.attribution_inputs.output.source_items, rules.attribute_attention.output.citations,
                        rules.attribute_embedding.output.citations, rules.attribute_self.output.citations,
                        rules.attribution_references.output.references, rules.score_attribution.output.scores,
                        rules.score_attribution.output.summary])
