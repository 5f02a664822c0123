"""The backends, in one registry that the client, the stages and the rules all read: what each
one can do (see images, needs a GPU) without loading it, and how to load it.

Loading imports the backend's module only then (inside the loader), so rules can ask which
backends hold a GPU at DAG parse time without importing a model runtime.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .settings import llm_settings


@dataclass(frozen=True)
class Backend:
    name: str
    sees_images: bool  # attached images reach the model; otherwise each is counted llm_images_not_seen
    gpus: int  # GPUs one job on this backend holds (a rule's `resources: gpu`)
    # The class: model_id(settings); options(settings), the request options that change answers (for
    # the cache key); endpoint(settings) -> (name, max_in_flight, slots_dir or None), the server its
    # calls share (scheduler.Endpoint); cls(settings, count, endpoint); send(call) -> Result, called
    # from the endpoint's worker threads; close().
    load: Callable[[], type]


def _llamacpp() -> type:
    from .llamacpp import LlamaCppBackend

    return LlamaCppBackend


def _openai() -> type:
    from .openai import OpenAIBackend

    return OpenAIBackend


def _vllm() -> type:
    from .vllm import VLLMBackend

    return VLLMBackend


BACKENDS = {
    "llamacpp": Backend("llamacpp", sees_images=False, gpus=0, load=_llamacpp),
    "openai": Backend("openai", sees_images=True, gpus=0, load=_openai),  # the server holds the GPU, not the job
    "vllm": Backend("vllm", sees_images=True, gpus=1, load=_vllm),
}


def sees_images(params: dict) -> bool:
    """A stage's `vision` param, or else whether its `llm` param's backend takes images."""
    if params["vision"] is not None:
        return params["vision"]
    return BACKENDS[llm_settings(params["llm"])["backend"]].sees_images


def gpus(settings: dict) -> int:
    """GPUs a job with these merged llm settings holds (a rule's `resources: gpu`), so that
    `--resources gpu=N` bounds how many model jobs share a GPU machine."""
    return BACKENDS[settings["backend"]].gpus
