"""Config validation: the demo and the real recipe are valid; the family schemas are generated from
the stages' Param declarations and the committed files match them; typos, wrong types and old
section names fail naming the key; Param checks the stage CLI's params through the same schema."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, demo_config
from stages.core.config import RENAMED, ConfigError, validate_config
from stages.core.config_schema import main, outputs
from stages.core.stage import Param, StageError


@pytest.fixture
def demo():
    return demo_config()


def test_demo_config_is_valid(demo):
    validate_config(demo)


def test_real_recipe_layers_over_the_base_alone():
    """config/recipe_real.yaml is merged over config/config.yaml exactly as Snakemake merges
    --configfile, without the demo overlay, and is valid on its own."""
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config" / "recipe_real.yaml").read_text()))
    validate_config(config)
    assert config["llm"]["backend"] == "openai" and "llamacpp" not in config["llm"]  # nothing of the demo's model
    assert config["mavis"]["harvest_pushshift"]["domains"]  # the base's Table 11 merged under the recipe's keys


def test_committed_schemas_match_the_stage_params():
    """Regenerate every family schema from the Params: a Param edited without
    `python -m stages.core.config_schema --write` fails here, so schema and Params cannot disagree."""
    generated = outputs()
    assert {p.name for p in generated} == {f"{s}.schema.yaml" for s in ("attribution", "citeeval", "estimate", "eval_mcitebench", "eval_m2rag", "eval_mavis", "images", "m2rag", "mavis", "mcitebench", "retrieval")}
    stale = [p.name for p, text in generated.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run python -m stages.core.config_schema --write; out of date: {stale}"
    assert main(["--check"]) == 0  # the command says the same


def test_sections_are_named_after_the_stage_they_feed(demo):
    from stages.core.layout import stage_path

    for family in ("mavis", "images", "m2rag", "mcitebench"):
        for key, value in demo[family].items():
            if isinstance(value, dict):
                stage_path(key)  # raises unless stages/<group>/<key>.py exists
    for old, new in [(old, name) for old, names in RENAMED.items() for name in ([names] if isinstance(names, str) else names)]:
        schema = yaml.safe_load((REPO / "schemas" / "config" / f"{new.split('.')[0]}.schema.yaml").read_text())
        for key in new.split(".")[1:]:  # every hint points at a key the schema has
            schema = schema["properties"][key]
        assert schema.get("type") or schema.get("$ref"), new


def test_section_schema_is_the_params_schema():
    """What the config accepts for a stage key is exactly what the stage CLI accepts."""
    from stages.images.cache_images import STAGE

    schema = yaml.safe_load((REPO / "schemas" / "config" / "images.schema.yaml").read_text())
    workers = schema["properties"]["cache_images"]["properties"]["workers"]
    assert workers == STAGE.params["workers"].json_schema()
    assert workers["description"] == STAGE.params["workers"].help and workers["minimum"] == 1


def test_parse_time_imports_no_stage_module(demo):
    """Snakemake validates against the committed files and derives every rule from the stage
    manifest: DAG parse imports no stage module (they pull in torch, datasets, open_clip) and no pyarrow."""
    code = (
        "import sys, yaml\n"
        "from stages.core.config import validate_config\n"
        "from stages.core.layout import stage_sources\n"
        "from snakemake.utils import update_config\n"
        "from stages.core.wiring import load_steps\n"
        "config = yaml.safe_load(open('config/config.yaml'))\n"
        "update_config(config, yaml.safe_load(open('config/demo.yaml')))\n"
        "validate_config(config)\n"
        "wiring = load_steps(config)\n"
        "[step.settings(w) for step in wiring.steps.values() for w in (step.domain if step.slot else [{}])]\n"
        "stage_sources('filter_images')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pyarrow', 'datasets', 'open_clip')"
        " or (m.startswith('stages.') and not m.startswith('stages.core')))\n"
        "print(bad)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_top_level_typo_and_wrong_type(demo):
    bad = copy.deepcopy(demo)
    bad["shard"] = 3
    bad["shards"] = "two"
    with pytest.raises(ConfigError) as err:
        validate_config(bad)
    assert "unknown config key 'shard'" in str(err.value)
    assert "config key 'shards' must be int, got str 'two'" in str(err.value)


def test_every_problem_is_listed_one_line_each(demo):
    bad = copy.deepcopy(demo)
    bad["images"]["cache_images"] = {"workers": 0}
    bad["mavis"]["filter"] = {}
    bad["run"] = ".."
    lines = str(pytest.raises(ConfigError, validate_config, bad).value).splitlines()
    assert lines[0] == "invalid config:" and len(lines) == 4
    assert "  config key 'images.cache_images.workers' must be >= 1, got 0" in lines


def test_the_attribution_models_are_named_where_they_run(demo):
    """generate_attributed and mcitebench_attention have no default model (the seed's are local
    model folders, the embedded SmolLM2 is the demo's): an enabled attribution section names the
    summariser; mcitebench_attention asks for its model only when it is switched on."""
    bad = copy.deepcopy(demo)
    del bad["attribution"]["generate_attributed"]
    bad["attribution"]["mcitebench_attention"] = {"enabled": False}
    lines = str(pytest.raises(ConfigError, validate_config, bad).value).splitlines()
    assert lines == ["invalid config:", "  config key 'attribution' misses required key(s) ['generate_attributed']"]
    bad["attribution"]["generate_attributed"] = {"modes": ["text"]}
    bad["attribution"]["mcitebench_attention"] = {"enabled": True}
    lines = str(pytest.raises(ConfigError, validate_config, bad).value).splitlines()
    assert lines == ["invalid config:", "  config key 'attribution.generate_attributed' misses required key(s) ['model', 'model_name']",
                     "  config key 'attribution.mcitebench_attention' misses required key(s) ['model', 'model_name']"]
    bad["attribution"]["mcitebench_attention"] = {"max_new_tokens": 64}  # off unless enabled: true
    lines = str(pytest.raises(ConfigError, validate_config, bad).value).splitlines()
    assert lines == ["invalid config:", "  config key 'attribution.generate_attributed' misses required key(s) ['model', 'model_name']"]
    bad["attribution"] = {"enabled": False}
    validate_config(bad)  # a section switched off needs nothing


def test_a_number_written_with_an_exponent_is_that_number(tmp_path):
    """YAML 1.1, which Snakemake reads config files with, reads 1e-3 as text; the config takes it
    as the number its author wrote wherever a number is expected, and the rule's params carry it.
    Text where a number is expected that is no such number is still named."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("images:\n  filter_images:\n    clip_threshold: 1e-3\n")
    assert yaml.safe_load(recipe.read_text())["images"]["filter_images"]["clip_threshold"] == "1e-3"
    run = subprocess.run([sys.executable, "-m", "stages.core.explain", "--configfile", "config/config.yaml", "config/demo.yaml",
                          str(recipe), "--rule", "filter_images", "--job-params", "--no-dry-run"],
                         cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["clip_threshold"] == 0.001
    recipe.write_text("images:\n  filter_images:\n    clip_threshold: 1e-3x\n")
    config = demo_config()
    config["images"]["filter_images"] = yaml.safe_load(recipe.read_text())["images"]["filter_images"]
    with pytest.raises(ConfigError, match="config key 'images.filter_images.clip_threshold' must be float, got str '1e-3x'"):
        validate_config(config)


@pytest.mark.parametrize("spec, value, message", [
    (Param(int, 8, min=1), 0, "param 'p' must be >= 1, got 0"),
    (Param(int, 8, min=1), 2.0, "param 'p' must be int, got float 2.0"),
    (Param(int, 8, min=1), True, "param 'p' must be int, got bool True"),
    (Param(float, 1.0, above=0), 0, "param 'p' must be > 0, got 0"),
    (Param(str, "a", choices=("a", "b")), "c", "param 'p' must be one of ['a', 'b'], got 'c'"),
    (Param(list, [], items=str), ["x", 3], "param 'p.1' must be str, got int 3"),
    (Param(dict, {}, items=Param(list, items=str)), {"k": "v"}, "param 'p.k' must be list, got str 'v'"),
    (Param(list, [], items=Param(dict, fields={"id": Param(int, max=11)})), [{"id": 12}], "param 'p.0.id' must be <= 11, got 12"),
    (Param(dict, {}, fields={"id": Param(str)}), {}, "param 'p' misses required key(s) ['id']"),
    (Param(dict, {}, fields={"id": Param(str)}), {"id": "a", "x": 1}, "param 'p.x' is unknown (allowed here: id)"),
    (Param(str, help="release", pattern=Param.PLAIN_NAME), "../up", "param 'p' must be a plain name"),
    (Param(str, help="release", pattern=Param.PLAIN_NAME), "r" * 129, "param 'p' must be a plain name"),  # past a file name
    (Param(dict, {}, schema="llm"), {"backend": "gpt"}, "param 'p.backend' must be one of ['llamacpp', 'openai', 'vllm'], got 'gpt'"),
    (Param(dict, {}, schema="fetch"), {"allow_networks": ["10.0.0.0/33"]}, "param 'p.allow_networks.0' must be a CIDR network"),
])
def test_param_check_names_the_entry(spec, value, message):
    with pytest.raises(StageError) as err:
        spec.check("p", value)
    assert str(err.value).startswith(message)


def test_param_check_accepts_and_coerces():
    assert Param(float, 1.0, min=0).check("p", 2) == 2.0 and isinstance(Param(float, 1.0).check("p", 2), float)
    assert Param(int, None, min=1).check("p", None) is None
    assert Param(str, None, choices=("a",)).check("p", None) is None
    assert Param(dict, {}, schema="fetch").check("p", {"allow_networks": ["127.0.0.1/32"]})


def test_help_shows_the_bounds():
    from stages.images.phash_dedup import STAGE

    text = STAGE._parser().format_help()
    assert "radius                 int (>= 0; <= 64) [6]" in text
    assert "scope                  str (one of: owner, query, global)" in text
