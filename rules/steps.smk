# Every declared step becomes one rule (stages/core/wiring.py derives its files and params).
import shlex

from stages.core.layout import stage_module


def _io(step):
    """--input/--output flags from a job's inputs and outputs (sidecars are the runner's own)."""
    def flags(wildcards, input, output):
        args = []
        for name, paths in step.inputs(dict(wildcards.items())).items():
            args += [f"--input={name}={p}" for p in paths]
        for name, value in output.items():
            if not name.startswith("sidecar_"):
                args += [f"--output={name}={p}" for p in ([value] if isinstance(value, str) else value)]
        return " ".join(shlex.quote(a) for a in args)
    return flags


def _outputs(step):
    outs = step.outputs()
    return {name: report(path, **step.reports[name]) if name in step.reports else path for name, path in outs.items()}


for _step in W.steps.values():
    rule:
        name: _step.rule
        input:
            unpack(lambda wildcards, s=_step: s.inputs(dict(wildcards.items()))),
            code=_step.code(),
        output:
            **_outputs(_step),
        params:
            module=stage_module(_step.stage),
            io=_io(_step),
            settings=_step.settings,
            **_step.rerun_on,  # not passed to the stage: a change reruns the rule (a given release's content)
        wildcard_constraints:
            **_step.constraints,
        threads: _step.threads
        resources:
            gpu=_step.gpu,
        log:
            _step.log(),
        benchmark:
            _step.benchmark()
        shell:  # a literal: Snakemake evaluates a shell expression when the job runs, after the loop has moved on
            "python -m {params.module} {params.io} --params {params.settings:q} > {log} 2>&1"
