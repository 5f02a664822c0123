"""See before you spend: every rule's effective params, where each value comes from, the model and
endpoint each model role calls, and the rules that would run.

    python -m stages.core.explain                                  # the demo (config/demo.yaml on top)
    python -m stages.core.explain --configfile config/recipe_real.yaml
    python -m stages.core.explain --configfile config/recipe_real.yaml --rule filter_entailment_text --json
    python -m stages.core.explain --rule filter_questions --job-params > params.json   # a job's --params, to run its stage alone

The configuration is layered as Snakemake layers it (stages/core/wiring.py): config/config.yaml
(`base`), config/demo.yaml only when no --configfile is given (`demo overlay`), each --configfile
(`recipe <file>`), then --config KEY=VALUE (`command line`). A param no layer sets is the stage's
own default (`stage default`); `rule wiring` is what the rule file fixes (columns, scopes, per-job
values); `model layer default` is stages/core/llm/settings.py's DEFAULTS.

Exit status: 0 when the report is printed and Snakemake's dry run plans the targets; 1 when the
report is printed but the dry run cannot plan them (missing input files, named above the line that
says so), so a script can stop there; otherwise the error's one line.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from snakemake.cli import parse_config

from .config import ConfigError, validate_config
from .layout import ROOT
from .wiring import WiringError, load_steps

BASE = ROOT / "config" / "config.yaml"
DEMO = ROOT / "config" / "demo.yaml"


def layered_config(configfiles: list[str], overrides: list[str]) -> tuple[dict, list[tuple[str, dict]]]:
    """The merged configuration and its layers, in order: (name, values)."""
    layers = [("base", _load(BASE))]
    if not configfiles:
        layers.append(("demo overlay", _load(DEMO)))
    layers += [(f"recipe {path}", _load(Path(path))) for path in configfiles]
    if overrides:
        for item in overrides:
            if "=" not in item:
                raise SystemExit(f"explain: --config expects KEY=VALUE, got {item!r}")
        try:  # Snakemake's own reading of --config, so that explain shows what runs
            command_line = parse_config(overrides)
        except ValueError as err:
            raise SystemExit(f"explain: --config {' '.join(overrides)}: {err} Snakemake's --config takes top-level keys "
                             "(e.g. shards=4); put a nested setting in a recipe file of its own (--configfile ... mine.yaml)") from None
        layers.append(("command line", command_line))
    merged: dict = {}
    for _, values in layers:
        _update(merged, values)
    return merged, layers


def _load(path: Path) -> dict:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise SystemExit(f"explain: cannot read {path}: {err.strerror}") from None


def _update(config: dict, overwrite: dict) -> None:
    """Snakemake's update_config: mappings merge key by key, anything else is replaced."""
    for key, value in overwrite.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            _update(config[key], value)
        else:
            config[key] = value


_MISSING = object()


def _at(node: Any, path: str) -> Any:
    """The value at a dotted path, or _MISSING. A mapping key may hold dots itself (a model named
    gpt-4.1, an endpoint URL): the longest key that matches is taken first."""
    parts = path.split(".")
    i = 0
    while i < len(parts):
        if isinstance(node, list) and parts[i].isdecimal() and int(parts[i]) < len(node):
            node, i = node[int(parts[i])], i + 1
            continue
        if not isinstance(node, dict):
            return _MISSING
        for j in range(len(parts), i, -1):
            key = ".".join(parts[i:j])
            if key in node:
                node, i = node[key], j
                break
        else:
            return _MISSING
    return node


def origin_layer(origin: str, layers: list[tuple[str, dict]]) -> str:
    """The layer a config path's value came from: the last that sets it (or a list above it)."""
    if origin in ("wiring", "model layer default"):
        return {"wiring": "rule wiring"}.get(origin, origin)
    for name, values in reversed(layers):
        if _at(values, origin) is not _MISSING:
            return name
    return "stage default"


def explain(config: dict, layers: list[tuple[str, dict]], only: str | None = None, targets: tuple[str, ...] = ()) -> dict:
    """Per rule and job: every param leaf with its value and origin; per model role its endpoint."""
    wiring = load_steps(config, targets)
    rules: dict[str, Any] = {}
    roles = []
    for name, step in wiring.steps.items():
        if only and name != only:
            continue
        jobs = []
        for wildcards in (step.domain if step.slot else [{}]):
            values, origins = step.params(wildcards)
            leaves = {}
            for leaf, value in _leaves(values, origins):
                leaves[leaf] = {"value": value, "origin": origin_layer(origins[leaf], layers)}
            for param, spec in step.decl["params"].items():
                if param not in values:
                    leaves[param] = {"value": spec.get("default", "<required>"), "origin": "stage default"}
            jobs.append({"wildcards": wildcards, "params": leaves})
            for param, spec in step.decl["params"].items():
                for where, settings in model_roles(param, spec, values.get(param)):
                    openai = settings.get("openai") or {}
                    roles.append({
                        "rule": name, "job": wildcards, "role": where, "backend": settings.get("backend"),
                        "model": settings.get("model"),
                        "endpoint": openai.get("base_url") if settings.get("backend") == "openai" else "in process",
                        "api_key_env": openai.get("api_key_env") if settings.get("backend") == "openai" else None,
                    })
        rules[name] = {"stage": step.stage, "family": step.family, "jobs": jobs}
    return {"layers": [name for name, _ in layers], "rules": rules, "models": roles}


def _leaves(values: dict, origins: dict[str, str]):
    """(leaf, value) for every origin key: a param, or a key of a mapping param."""
    for leaf in sorted(origins):
        yield leaf, _at(values, leaf)


def model_roles(param: str, spec: dict, value: Any):
    """(role, settings) of each model a param configures: a model param, or each answerer's llm."""
    if spec.get("schema") == "llm" and isinstance(value, dict) and "backend" in value:
        yield param, value
    elif param == "answerers" and isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("llm"), dict):
                yield f"answerers[{item.get('name')}]", item["llm"]


def would_run(configfiles: list[str], overrides: list[str], targets: list[str], config: dict | None = None) -> tuple[bool, str]:
    """Snakemake's own dry run: whether it plans, and the jobs per rule that `snakemake <targets>`
    would run now, or why it cannot (Snakemake writes that to stdout), with each missing input
    file's config key."""
    command = [sys.executable, "-m", "snakemake", *targets, "-n", "--quiet", "rules", "--nolock"]  # read-only: beside a running build
    if configfiles:
        command += ["--configfile", *configfiles]
    if overrides:
        command += ["--config", *overrides]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 0:
        return True, done.stdout.strip()
    said = done.stdout + done.stderr
    missing = re.search(r"Missing input files for rule (\S+?):.*?affected files:\n((?:[ \t]+\S[^\n]*\n?)+)", said, re.S)
    if missing:
        keys = dict(_config_strings(config or {}))
        lines = [f"(snakemake -n failed: rule {missing.group(1)} misses input files; the first such rule is named, others may follow)"]
        for path in sorted(missing.group(2).split("\n")):  # Snakemake lists them in a set's order
            path = path.strip()
            if path:  # a configured file, or a file in a configured folder (mavis.harvest_pushshift.subreddit_dumps)
                key = keys.get(path) or keys.get(str(Path(path).parent))
                lines.append(f"  {path}" + (f"  (config {key})" if key else ""))
        return False, "\n".join(lines)
    noise = ("Using workflow specific profile", "Config file ", "Assuming unrestricted", "Building DAG", "Aborting")
    kept = [line for line in said.splitlines() if line.strip() and not line.startswith(noise)]
    return False, "(snakemake -n failed)\n" + "\n".join(kept[-30:])


def _config_strings(values: Any, where: str = ""):
    """(string value, its dotted config key) for every string in the config, list items as key[i]."""
    if isinstance(values, dict):
        for key, value in values.items():
            yield from _config_strings(value, f"{where}.{key}" if where else str(key))
    elif isinstance(values, list):
        for i, value in enumerate(values):
            yield from _config_strings(value, f"{where}[{i}]")
    elif isinstance(values, str):
        yield values, where


def _short(value: Any, width: int = 70) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def render(report: dict) -> str:
    lines = ["layers (later wins): " + " < ".join(["stage default", *report["layers"]]), ""]
    for name, rule in report["rules"].items():
        lines.append(f"rule {name} (stage {rule['stage']}, {rule['family']})")
        job = rule["jobs"][0]
        if len(rule["jobs"]) > 1:
            lines.append(f"  {len(rule['jobs'])} jobs; the first shown ({json.dumps(job['wildcards'])})")
        width = max([34, *map(len, job["params"])])  # the rule's longest name sets its column, so origins line up
        for leaf, item in job["params"].items():
            lines.append(f"  {leaf:<{width}} {_short(item['value']):<72} {item['origin']}")
        lines.append("")
    lines.append("model roles:")
    seen = set()
    for role in report["models"]:
        key = (role["rule"], role["role"], role["backend"], role["model"], role["endpoint"])
        if key in seen:
            continue
        seen.add(key)
        key_env = f" (key ${role['api_key_env']})" if role.get("api_key_env") else ""
        lines.append(f"  {role['rule']:<28} {role['role']:<22} {role['backend']:<9} {role['model']} @ {role['endpoint']}{key_env}")
    return "\n".join(lines)


def job_params(rule: dict) -> dict:
    """The values of the params of a rule's first job; when its jobs differ (a shard's own
    file, a scope), stderr says which job these are."""
    jobs = rule["jobs"]
    values = [{name: param["value"] for name, param in job["params"].items()} for job in jobs]
    if any(v != values[0] for v in values[1:]):
        print(f"explain: the params of job {jobs[0]['wildcards']} (its {len(jobs)} jobs differ)", file=sys.stderr)
    return values[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.core.explain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configfile", nargs="+", action="extend", default=[], help="recipe files, in order (as Snakemake's)")
    parser.add_argument("--config", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="top-level overrides, read as Snakemake reads them (shards=4); a nested setting goes in a recipe file")
    parser.add_argument("--rule", help="only this rule")
    parser.add_argument("--json", action="store_true", help="the whole report as JSON")
    parser.add_argument("--targets", nargs="+", default=["release", "evaluate"], help="targets of the dry run (default: release evaluate)")
    parser.add_argument("--no-dry-run", action="store_true", help="skip Snakemake's dry run (the rules that would run)")
    parser.add_argument("--job-params", action="store_true",
                        help="with --rule: the params its first job gets, as the JSON object its stage's --params reads")
    args = parser.parse_args(argv)
    if args.job_params and not args.rule:
        parser.error("--job-params needs --rule")
    config, layers = layered_config(args.configfile, args.config)
    try:
        validate_config(config)
        report = explain(config, layers, args.rule, tuple(args.targets))
    except (ConfigError, WiringError) as err:
        sys.exit(f"explain: {err}")
    if args.rule and not report["rules"]:
        sys.exit(f"explain: no rule {args.rule!r} in this configuration")
    if args.job_params:
        print(json.dumps(job_params(report["rules"][args.rule]), indent=1, default=str))
        return
    planned = True
    if not args.no_dry_run:
        planned, report["would_run"] = would_run(args.configfile, args.config, args.targets, config)
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print(render(report))
        if "would_run" in report:
            print("\nwould run (snakemake -n " + " ".join(args.targets) + "):\n" + report["would_run"])
    if not planned:
        sys.exit("explain: Snakemake cannot plan " + " ".join(args.targets) + " with this configuration yet (see above)")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # `| head` has read what it wanted: no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
