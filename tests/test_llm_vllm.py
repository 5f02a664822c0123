"""The vllm backend on a GPU (extra [gpu]): one offline engine, the whole batch in one chat call,
structured outputs by JSON schema, yes/no P(yes) from logprobs, cache hits without loading a model.
Skipped without a CUDA GPU and vllm; scripts/run_vllm_gpu.sh runs it on a GPU machine.
CITEFORGE_VLLM_MODEL must name the model: a local folder, or a Hub id already in the local cache
(resolved to its snapshot folder). Skipped otherwise: the test never downloads a model."""
from __future__ import annotations

import collections
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from stages.core.llm import LLMClient, LLMRequest
from stages.core.prompts import PromptLibrary

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None or shutil.which("nvidia-smi") is None, reason="needs vllm and a CUDA GPU"),
]


def local_model(name: str) -> tuple[str | None, str]:
    """(a local model folder, "") or (None, why the test is skipped)."""
    if not name:
        return None, "set CITEFORGE_VLLM_MODEL to a local model folder or a Hub id already in the local cache (never downloaded)"
    if Path(name).is_dir():
        return name, ""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(name, "config.json")
    if isinstance(config, str):
        return str(Path(config).parent), ""
    return None, f"CITEFORGE_VLLM_MODEL={name!r} is neither a local folder nor in the local Hub cache (never downloaded)"


MODEL, NO_MODEL = local_model(os.environ.get("CITEFORGE_VLLM_MODEL", ""))
pytestmark.append(pytest.mark.skipif(MODEL is None, reason=NO_MODEL))


def test_vllm_batch_structured_yes_no_and_cache(tmp_path):
    (tmp_path / "yn.md").write_text("---\nkind: yesno\nmax_tokens: 2\n---\nAnswer yes or no. {{ question }}\n")
    settings = {"backend": "vllm", "model": MODEL, "cache": {"path": str(tmp_path / "cache.sqlite")},
                "vllm": {"gpu_memory_utilization": 0.5, "max_model_len": 4096}}
    questions = ["How do volcanoes erupt?", "lol", "Why is the sky blue?"]
    batch = [LLMRequest(f"q{i}", "m2rag_query_clear", {"text": q}) for i, q in enumerate(questions)]
    stats = collections.Counter()
    with LLMClient.from_params(settings, stats=stats) as client:
        answers = client.run(batch)
        yes_no = PromptLibrary(tmp_path)
        client.prompts = yes_no
        verdicts = client.run([LLMRequest("y", "yn", {"question": "Is water wet?"})])
    assert [a.id for a in answers] == ["q0", "q1", "q2"]
    assert all(a.ok and a.value["label"] in (0, 1) for a in answers), [a.detail for a in answers]
    assert verdicts[0].p_yes is not None and 0 <= verdicts[0].p_yes <= 1
    assert stats["llm_calls"] >= 4 and stats["llm_prompt_tokens"] > 0
    again = collections.Counter()
    with LLMClient.from_params(settings, stats=again) as client:
        cached = client.run(batch)
        assert client._backend is None  # a fully cached batch never loads the engine
    assert [a.raw for a in cached] == [a.raw for a in answers] and again["llm_calls"] == 0
