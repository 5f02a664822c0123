"""Bad configs and bad stage params, one case per kind: each fails before any work with one line
naming the key (or the param) and what was expected. Cases mutate the demo config the way a user's
recipe layered over it would."""
from __future__ import annotations

import copy

import pytest
import yaml

from conftest import REPO, demo_config
from stages.core.config import ConfigError, validate_config

DEMO = demo_config()
# the top-level keys the schema allows, listed in the message (a new section changes them)
TOP_LEVEL = ", ".join(sorted(yaml.safe_load((REPO / "schemas" / "config.schema.yaml").read_text())["properties"]))


def _set(config, dotted, value):
    *parents, last = dotted.split(".")
    for key in parents:
        config = config.setdefault(key, {})
    config[last] = value


PLAIN = "must be a plain name (letters, digits, '_', '.', '-'; no '/', not starting with '.'; at most 128 characters)"
CIDR = "must be a CIDR network such as 10.0.0.0/8 or 127.0.0.1/32"

CONFIG_CASES = [
    # kind, dotted key, value, the one expected line
    ("unknown key", "mavis.filter_questions.min_answer_char", 400,
     "unknown config key 'mavis.filter_questions.min_answer_char' (allowed here: answers, min_answer_chars, min_answer_sentences, question_words)"),
    ("unknown top-level key", "shard", 3, f"unknown config key 'shard' (allowed here: {TOP_LEVEL})"),
    ("wrong type", "shards", "two", "config key 'shards' must be int, got str 'two'"),
    ("float for an int", "images.cache_images.workers", 2.0, "config key 'images.cache_images.workers' must be int, got float 2.0"),
    ("wrong item type", "mavis.harvest_pushshift.domains.Science", "askscience",
     "config key 'mavis.harvest_pushshift.domains.Science' must be list, got str 'askscience'"),
    ("wrong type in a record list", "m2rag.categories", [{"id": "one", "name": "x"}],
     "config key 'm2rag.categories.0.id' must be int, got str 'one'"),
    ("out of range: workers 0", "images.cache_images.workers", 0, "config key 'images.cache_images.workers' must be >= 1, got 0"),
    ("out of range: above max", "images.phash_dedup.radius", 65, "config key 'images.phash_dedup.radius' must be <= 64, got 65"),
    ("out of range: zero timeout", "mcitebench.harvest_openreview.timeout_s", 0,
     "config key 'mcitebench.harvest_openreview.timeout_s' must be > 0, got 0"),
    ("out of range: shards", "shards", 0, "config key 'shards' must be >= 1, got 0"),
    ("bad choice", "images.filter_images.device", "gpu", "config key 'images.filter_images.device' must be one of ['auto', 'cpu', 'cuda'], got 'gpu'"),
    ("bad choice in an llm override", "mcitebench.quality_control.llm", {"backend": "gpt"},
     "config key 'mcitebench.quality_control.llm.backend' must be one of ['llamacpp', 'openai', 'vllm'], got 'gpt'"),
    ("old section name", "mavis.filter", {"min_answer_chars": 400}, "config key 'mavis.filter' was renamed to 'mavis.filter_questions'"),
    ("old section name", "mcitebench.explanation_qa", {}, "config key 'mcitebench.explanation_qa' was renamed to 'mcitebench.extract_explanation_qa'"),
    ("old section name", "images.dedup", {"radius": 4}, "config key 'images.dedup' was renamed to 'images.phash_dedup'"),
    ("old section name", "evaluate.generate_answers.limit", 2, "config key 'evaluate' was renamed to 'eval_mcitebench'"),
    ("old flat key", "citeeval.limit", 2, "config key 'citeeval.limit' was renamed to 'citeeval.citeeval_prepare.limit'"),
    ("old subsection name", "citeeval.fit", {"rating_scale": "unit"}, "config key 'citeeval.fit' was renamed to 'citeeval.citeeval_fit'"),
    ("old key now in two stages' sections", "citeeval.max_tokens", 300,
     "config key 'citeeval.max_tokens' was renamed to 'citeeval.citeeval_context.max_tokens' and 'citeeval.citeeval_itercoe.max_tokens'"),
    ("bad choice: citeeval rating scale", "citeeval.citeeval_fit.rating_scale", "stars",
     "config key 'citeeval.citeeval_fit.rating_scale' must be one of ['likert5', 'unit'], got 'stars'"),
    ("bad run name: ..", "run", "..", f"config key 'run' {PLAIN}, got '..'"),
    ("bad run name: absolute", "run", "/tmp/x", f"config key 'run' {PLAIN}, got '/tmp/x'"),
    ("bad run name: slash", "run", "a/../../b", f"config key 'run' {PLAIN}, got 'a/../../b'"),
    ("bad run name: hidden", "run", ".x", f"config key 'run' {PLAIN}, got '.x'"),
    ("bad release name", "mavis.release_mavis.name", "../x", f"config key 'mavis.release_mavis.name' {PLAIN}, got '../x'"),
    ("bad CIDR: prefix", "fetch.allow_networks", ["127.0.0.1/32", "10.0.0.0/33"], f"config key 'fetch.allow_networks.1' {CIDR}, got '10.0.0.0/33'"),
    ("bad CIDR: not an address", "fetch.allow_networks", ["localhost"], f"config key 'fetch.allow_networks.0' {CIDR}, got 'localhost'"),
    ("missing required key", "mavis.release_mavis", {}, "config key 'mavis.release_mavis' misses required key(s) ['name']"),
]


@pytest.mark.parametrize("kind, key, value, line", CONFIG_CASES, ids=[f"{c[0]}:{c[1]}" for c in CONFIG_CASES])
def test_bad_config_fails_with_one_line(kind, key, value, line):
    config = copy.deepcopy(DEMO)
    _set(config, key, value)
    with pytest.raises(ConfigError) as err:
        validate_config(config)
    assert [text.strip() for text in str(err.value).splitlines()[1:]] == [line]


PARAM_CASES = [
    # kind, stage, argv, the expected message (stage-named, one line)
    ("unknown param in --params", "filter_questions", ["--params", '{"question_words": ["why"], "min_answer_char": 3}'],
     "filter_questions: error: unknown param(s) ['min_answer_char']; filter_questions takes ['answers', 'min_answer_chars', 'min_answer_sentences', 'question_words']"),
    ("param of the wrong type", "filter_questions", ["--params", '{"question_words": "why"}'],
     "filter_questions: error: param 'question_words' must be list, got str 'why'"),
    ("param item of the wrong type", "filter_questions", ["--params", '{"question_words": ["why", 3]}'],
     "filter_questions: error: param 'question_words.1' must be str, got int 3"),
    ("param out of range", "phash_dedup", ["--param", "workers=0"], "phash_dedup: error: param 'workers' must be >= 1, got 0"),
    ("param not a choice", "phash_dedup", ["--param", "scope=page"],
     "phash_dedup: error: param 'scope' must be one of ['owner', 'query', 'global'], got 'page'"),
    ("bad CIDR in a stage's fetch settings", "cache_images", ["--params", '{"fetch": {"allow_networks": ["300.0.0.0/8"]}}'],
     f"cache_images: error: param 'fetch.allow_networks.0' {CIDR}, got '300.0.0.0/8'"),
    ("invalid JSON in --params", "phash_dedup", ["--params", '{"radius": 4'],
     "phash_dedup: error: --params: inline JSON is not valid JSON/YAML: expected ',' or '}', but got '<stream end>' at line 1 column 13"),
    ("required param missing", "filter_questions", ["--param", "min_answer_chars=10"],
     "filter_questions: error: param 'question_words' is required: a title must start with one of these (case-insensitive)"),
]


@pytest.mark.parametrize("kind, stage, argv, message", PARAM_CASES, ids=[c[0] for c in PARAM_CASES])
def test_bad_stage_params_fail_with_one_line(kind, stage, argv, message, tmp_path):
    """Through the stage's real CLI entry point: the params are checked before any input is read."""
    import importlib

    from stages.core.layout import stage_module

    module = importlib.import_module(stage_module(stage))
    with pytest.raises(SystemExit) as exc:
        module.STAGE.main(["--output", f"x={tmp_path / 'x.parquet'}", *argv])
    assert str(exc.value) == message
    assert not list(tmp_path.iterdir())
