# MCiteBench construction (seed mcitebench.txt §3.3-3.6): rebuttal threads and parsed papers ->
# explanation and locating QA -> evidence pairing -> distractors -> quality control -> release.
# The OpenReview harvest and PDF parsing rules live in rules/openreview.smk.
MC = config.get("mcitebench", {})
_CROPS = MC.get("parse_pdfs", {}).get("image_store", "data/cache/images")  # where parse_pdfs puts figure/table crops


def _llm(section):
    """Images resolve in the crop store unless the llm section names another."""
    return llm_settings(config.get("llm"), section.get("llm"), image_store=_CROPS)


def _stage_settings(stage, with_llm=False):
    """The stage's section (mcitebench.<stage>); a model stage's llm overrides merged into llm:."""
    out = {k: v for k, v in MC.get(stage, {}).items() if k != "llm"}
    return {**out, "llm": _llm(MC.get(stage, {}))} if with_llm else out


if MC.get("enabled", False):
    _THREADS = run_path("mcitebench", "harvest_openreview", "threads")
    _ELEMENTS = run_path("mcitebench", "parse_pdfs", "elements")

    rule extract_explanation_qa:
        input:
            stage=stage_code("extract_explanation_qa"),
            prompts=prompt_files("mcitebench_explanation_qa"),
            threads=_THREADS,
        output:
            qa=run_path("mcitebench", "extract_explanation_qa", "explanation_qa"),
        params:
            io=stage_io,
            version=stage_version("extract_explanation_qa"),
            settings=settings(_stage_settings("extract_explanation_qa", with_llm=True)),
        resources:
            gpu=gpus(_llm(MC.get("extract_explanation_qa", {}))),
        log:
            log_path("mcitebench", "extract_explanation_qa"),
        benchmark:
            bench_path("mcitebench", "extract_explanation_qa")
        shell:
            stage_shell("extract_explanation_qa")

    rule generate_locating_qa:
        input:
            stage=stage_code("generate_locating_qa"),
            prompts=prompt_files("mcitebench_locating_qa"),
            elements=_ELEMENTS,
        output:
            qa=run_path("mcitebench", "generate_locating_qa", "locating_qa"),
        params:
            io=stage_io,
            version=stage_version("generate_locating_qa"),
            settings=settings(_stage_settings("generate_locating_qa", with_llm=True)),
        resources:
            gpu=gpus(_llm(MC.get("generate_locating_qa", {}))),
        log:
            log_path("mcitebench", "generate_locating_qa"),
        benchmark:
            bench_path("mcitebench", "generate_locating_qa")
        shell:
            stage_shell("generate_locating_qa")

    rule pair_evidence:
        input:
            stage=stage_code("pair_evidence"),
            qa=[rules.extract_explanation_qa.output.qa, rules.generate_locating_qa.output.qa],
            elements=_ELEMENTS,
            review=[MC["pairing_review"]] if MC.get("pairing_review") else [],
        output:
            questions=run_path("mcitebench", "pair_evidence", "paired_questions"),
            evidence=run_path("mcitebench", "pair_evidence", "evidence"),
            pairing_sheet=f"{RUNDIR}/mcitebench/pair_evidence/pairing_sheet.csv",
        params:
            io=stage_io,
            version=stage_version("pair_evidence"),
            settings=settings(_stage_settings("pair_evidence")),
        log:
            log_path("mcitebench", "pair_evidence"),
        benchmark:
            bench_path("mcitebench", "pair_evidence")
        shell:
            stage_shell("pair_evidence")

    rule sample_distractors:
        input:
            stage=stage_code("sample_distractors"),
            questions=rules.pair_evidence.output.questions,
            evidence=rules.pair_evidence.output.evidence,
            elements=_ELEMENTS,
        output:
            questions=run_path("mcitebench", "sample_distractors", "sampled_questions"),
            distractors=run_path("mcitebench", "sample_distractors", "distractors"),
        params:
            io=stage_io,
            version=stage_version("sample_distractors"),
            settings=settings(_stage_settings("sample_distractors")),
        log:
            log_path("mcitebench", "sample_distractors"),
        benchmark:
            bench_path("mcitebench", "sample_distractors")
        shell:
            stage_shell("sample_distractors")

    _CHECKS = MC.get("check_questions", {})

    rule check_questions:
        input:
            stage=stage_code("check_questions"),
            prompts=prompt_files(*_CHECKS.get("example_prompts", ["mcitebench_locating_qa", "mcitebench_explanation_qa"])),
            questions=rules.sample_distractors.output.questions,
            evidence=rules.pair_evidence.output.evidence,
            elements=_ELEMENTS,
        output:
            questions=run_path("mcitebench", "check_questions", "screened_questions"),
        params:
            io=stage_io,
            version=stage_version("check_questions"),
            settings=settings(_CHECKS),
        log:
            log_path("mcitebench", "check_questions"),
        benchmark:
            bench_path("mcitebench", "check_questions")
        shell:
            stage_shell("check_questions")

    rule quality_control:
        input:
            stage=stage_code("quality_control"),
            prompts=prompt_files("mcitebench_quality_control"),
            questions=rules.check_questions.output.questions,
            evidence=rules.pair_evidence.output.evidence,
            distractors=rules.sample_distractors.output.distractors,
            elements=_ELEMENTS,
        output:
            questions=run_path("mcitebench", "quality_control", "checked_questions"),
            judgements=run_path("mcitebench", "quality_control", "judgements"),
            review_sheet=f"{RUNDIR}/mcitebench/quality_control/review_sheet.csv",
        params:
            io=stage_io,
            version=stage_version("quality_control"),
            settings=settings(_stage_settings("quality_control", with_llm=True)),
        resources:
            gpu=gpus(_llm(MC.get("quality_control", {}))),
        log:
            log_path("mcitebench", "quality_control"),
        benchmark:
            bench_path("mcitebench", "quality_control")
        shell:
            stage_shell("quality_control")

    rule release_mcitebench:
        input:
            stage=stage_code("release_mcitebench"),
            questions=rules.quality_control.output.questions,
            evidence=rules.pair_evidence.output.evidence,
            distractors=rules.sample_distractors.output.distractors,
            elements=_ELEMENTS,
            review=[MC["review_sheet"]] if MC.get("review_sheet") else [],
        output:
            manifest=f"{RUNDIR}/mcitebench/release_mcitebench/release.json",
        params:
            io=stage_io,
            version=stage_version("release_mcitebench"),
            settings=settings({"image_store": _CROPS, **MC.get("release_mcitebench", {}), "releases_dir": RELEASES_DIR}),
        log:
            log_path("mcitebench", "release_mcitebench"),
        benchmark:
            bench_path("mcitebench", "release_mcitebench")
        shell:
            stage_shell("release_mcitebench")

    RELEASES.append(rules.release_mcitebench.output.manifest)
    CATALOG_TABLES.extend([
        rules.extract_explanation_qa.output.qa,
        rules.generate_locating_qa.output.qa,
        rules.pair_evidence.output.questions,
        rules.pair_evidence.output.evidence,
        rules.sample_distractors.output.questions,
        rules.sample_distractors.output.distractors,
        rules.check_questions.output.questions,
        rules.quality_control.output.questions,
        rules.quality_control.output.judgements,
    ])
