"""Config validation: the demo config is valid; typos and wrong types fail naming the key."""
from __future__ import annotations

import copy

import pytest
import yaml

from conftest import REPO
from stages.core.config import ConfigError, validate_config


@pytest.fixture
def demo():
    return yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def test_demo_config_is_valid(demo):
    validate_config(demo)


def test_typo_names_the_key(demo):
    bad = copy.deepcopy(demo)
    bad["mavis"]["filter"]["min_answer_char"] = 400
    with pytest.raises(ConfigError, match=r"unknown config key 'mavis.filter.min_answer_char'"):
        validate_config(bad)


def test_top_level_typo_and_wrong_type(demo):
    bad = copy.deepcopy(demo)
    bad["shard"] = 3
    bad["shards"] = "two"
    with pytest.raises(ConfigError) as err:
        validate_config(bad)
    assert "unknown config key 'shard'" in str(err.value)
    assert "config key 'shards': 'two' is not of type 'integer'" in str(err.value)


def test_real_recipe_layers_over_the_demo(demo):
    """config/recipe_real.yaml is merged over the demo exactly as Snakemake merges --configfile."""
    from snakemake.utils import update_config

    recipe = yaml.safe_load((REPO / "config" / "recipe_real.yaml").read_text())
    update_config(demo, recipe)
    validate_config(demo)
    assert demo["llm"]["backend"] == "openai" and demo["llm"]["llamacpp"]  # nested keys merged, not replaced
