"""The one settings merge of the model layer, used by the rules at DAG parse time and by the client
in the job (so it imports nothing heavy: no model runtime, no table machinery).

A stage's `llm` param is `llm_settings(config["llm"], <the stage's llm override>, **rule defaults)`:
the defaults below, then what the rule supplies where the config is silent (e.g. the crop store as
`image_store`), then the config's `llm:` section, then the stage's override; nested mappings
(`cache`, `openai`, ...) merge one level deep. The result is validated against
schemas/config/llm.schema.yaml. The client merges its param again, which changes nothing for a
merged param and fills the defaults for a hand-written one (`--params` of a stage run alone).
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from stages.core.errors import StageError

SETTINGS_SCHEMA = Path(__file__).resolve().parents[3] / "schemas" / "config" / "llm.schema.yaml"

DEFAULTS: dict[str, Any] = {
    "backend": "llamacpp",
    "model": "SmolLM2-135M-Instruct.Q4_1",
    "seed": 0,
    "max_attempts": 3,
    "retry_temperature": 0.7,
    "image_store": "data/cache/images",
    "image_max_side": 0,
    "max_answer_chars": 100_000,
    "cache": {"mode": "use", "path": "data/cache/llm.sqlite", "per_host": False},
    "llamacpp": {"model_path": None, "n_ctx": 4096, "n_threads": 1},
    "openai": {
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": None,
        "max_in_flight": 64,
        "slots_dir": None,
        "timeout_s": 120.0,
        "max_retries": 5,
        "logprobs": True,
        "response_format": "json_schema",
        "extra_body": {},
        "headers": {},
    },
    "vllm": {
        "tensor_parallel_size": 1,
        "gpu_memory_utilization": 0.9,
        "max_model_len": None,
        "dtype": "auto",
        "enable_prefix_caching": True,
        "trust_remote_code": False,
        "max_in_flight": 256,
    },
}


class LLMError(StageError):
    """Bad llm settings, a missing model, an unusable call cache or a backend outage: the job
    fails with one line naming what to fix, nothing is guessed."""


def llm_settings(*layers: dict | None, **defaults: Any) -> dict:
    """DEFAULTS, then `defaults`, then each layer in turn (None = nothing), validated."""
    settings = copy.deepcopy(DEFAULTS)
    for layer in (defaults, *layers):
        for key, value in (layer or {}).items():
            if isinstance(value, dict) and isinstance(settings.get(key), dict):
                settings[key] = {**settings[key], **value}
            else:
                settings[key] = copy.deepcopy(value)
    errors = sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(settings), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"llm.{'.'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in errors]
        raise LLMError("invalid llm settings: " + "; ".join(lines))
    return settings


@functools.cache
def _schema() -> dict:
    """Read once per process: the rules merge settings for every model-calling rule."""
    return yaml.safe_load(SETTINGS_SCHEMA.read_text())
