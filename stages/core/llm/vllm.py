"""The vllm backend: an offline `vllm.LLM` on a GPU (extra `[gpu]`), one per model per process,
shared by every client of that model and shut down when the last one closes. It shares the
OpenAI-compatible path's messages (images as data URLs), model id and scheduler: the endpoint's
workers hand their calls to the engine's thread, which sends whatever has queued as one `chat`
batch (prefix caching on) while the previous batch runs, so roles submitted together and retries
ride the next batch. What is its own is how it reads sampling, structured outputs (JSON schema)
and yes/no log-probabilities.

Each engine takes its `gpu_memory_utilization` share of the GPU: a job whose roles are different
vllm models holds them all at once, so their shares must add up to less than 1 (or serve them
with `vllm serve` and the openai backend).
"""
from __future__ import annotations

import gc
import json
import queue
import threading
from concurrent.futures import Future

from .calls import Call, Result, sampling_kwargs, yes_probability
from .openai import OpenAIBackend, openai_messages
from .scheduler import Endpoint, Shared
from .settings import LLMError


class _Engine:
    """One vllm.LLM and the thread that feeds it batches."""

    def __init__(self, vllm, settings: dict):
        kwargs = {k: v for k, v in settings["vllm"].items() if v is not None and k != "max_in_flight"}
        self.llm = vllm.LLM(model=settings["model"], seed=settings["seed"], **kwargs)
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="llm-vllm-engine", daemon=True)
        self.thread.start()

    def submit(self, messages: list[dict], params) -> Future:
        future: Future = Future()
        self.queue.put((messages, params, future))
        return future

    def _loop(self) -> None:
        while (item := self.queue.get()) is not None:
            batch = [item]
            while not self.queue.empty() and (item := self.queue.get()) is not None:
                batch.append(item)
            self._run(batch)
            if item is None:
                return

    def _run(self, batch: list) -> None:
        try:
            outputs = self.llm.chat([m for m, _, _ in batch], sampling_params=[p for _, p, _ in batch], use_tqdm=False)
        except ValueError as err:  # a request vLLM refuses (e.g. longer than the context) fails alone: halve until found
            if len(batch) > 1:
                self._run(batch[: len(batch) // 2])
                self._run(batch[len(batch) // 2 :])
                return
            batch[0][2].set_result(err)
            return
        except BaseException as err:
            for _, _, future in batch:
                future.set_exception(err)
            return
        for (_, _, future), out in zip(batch, outputs):
            future.set_result(out)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        # vLLM >= 0.11 has LLM.shutdown(); the V1 engine before it, its engine core's shutdown(),
        # which ends the engine-core process and with it the GPU memory it holds.
        stop = getattr(self.llm, "shutdown", None) or getattr(getattr(self.llm.llm_engine, "engine_core", None), "shutdown", None)
        if stop is not None:
            stop()
        else:  # the V0 engine runs in this process
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        self.llm = None
        gc.collect()
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


class VLLMBackend:
    model_id = staticmethod(OpenAIBackend.model_id)

    @staticmethod
    def options(settings: dict) -> dict:
        return {}

    @staticmethod
    def _key(settings: dict) -> tuple:
        return ("vllm", settings["model"], settings["seed"], json.dumps(settings["vllm"], sort_keys=True))

    @staticmethod
    def endpoint(settings: dict) -> tuple[str, int, None]:
        return "|".join(map(str, VLLMBackend._key(settings))), settings["vllm"]["max_in_flight"], None

    def __init__(self, settings: dict, count=None, endpoint: Endpoint | None = None):
        try:
            import vllm
        except ImportError as err:
            raise LLMError(f"the vllm backend needs the [gpu] extra (pip install 'citeforge[gpu]'): {err}") from None
        self.vllm = vllm
        self._engine_key = self._key(settings)
        self.engine = Shared.take(self._engine_key, lambda: _Engine(vllm, settings))
        try:  # vllm >= 0.10.2 names it structured_outputs; older releases guided_decoding
            from vllm.sampling_params import StructuredOutputsParams

            self._structured = lambda schema: {"structured_outputs": StructuredOutputsParams(json=schema)}
        except ImportError:
            from vllm.sampling_params import GuidedDecodingParams

            self._structured = lambda schema: {"guided_decoding": GuidedDecodingParams(json=schema)}

    def _params(self, call: Call):
        kwargs = sampling_kwargs(call)
        if call.kind == "json":
            kwargs.update(self._structured(call.schema))
        if call.kind == "yesno":
            kwargs["logprobs"] = 20
        return self.vllm.SamplingParams(**kwargs)

    def send(self, call: Call) -> Result:
        out = self.engine.submit(openai_messages(call), self._params(call)).result()
        if isinstance(out, ValueError):
            return Result("", error=f"backend: {out}")
        completion = out.outputs[0]
        p_yes = None
        if call.kind == "yesno" and completion.logprobs:
            p_yes = yes_probability((lp.decoded_token or "", lp.logprob) for lp in completion.logprobs[0].values())
        return Result(completion.text, p_yes, len(out.prompt_token_ids or []), len(completion.token_ids),
                      finish_reason=completion.finish_reason)

    def close(self) -> None:
        if self.engine is not None:
            self.engine = None
            Shared.drop(self._engine_key)
