"""The vllm backend: one offline `vllm.LLM` per job on a GPU (extra `[gpu]`), the whole batch in one
`chat` call with prefix caching. It shares the OpenAI-compatible path's messages (images as data
URLs) and model id; what is its own is the engine and how it reads sampling, structured outputs
(JSON schema) and yes/no log-probabilities."""
from __future__ import annotations

from typing import Iterator

from .calls import Call, Result, sampling_kwargs, yes_probability
from .openai import OpenAIBackend, openai_messages
from .settings import LLMError


class VLLMBackend:
    model_id = staticmethod(OpenAIBackend.model_id)

    def __init__(self, settings: dict, count=None):
        try:
            import vllm
        except ImportError as err:
            raise LLMError(f"the vllm backend needs the [gpu] extra (pip install 'citeforge[gpu]'): {err}") from None
        self.vllm = vllm
        kwargs = {k: v for k, v in settings["vllm"].items() if v is not None}
        self.llm = vllm.LLM(model=settings["model"], seed=settings["seed"], **kwargs)
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

    def generate(self, calls: list[Call]) -> Iterator[tuple[int, Result]]:
        outputs = self.llm.chat([openai_messages(c) for c in calls], sampling_params=[self._params(c) for c in calls], use_tqdm=True)
        for i, (call, out) in enumerate(zip(calls, outputs)):
            completion = out.outputs[0]
            p_yes = None
            if call.kind == "yesno" and completion.logprobs:
                p_yes = yes_probability((lp.decoded_token or "", lp.logprob) for lp in completion.logprobs[0].values())
            yield i, Result(completion.text, p_yes, len(out.prompt_token_ids or []), len(completion.token_ids),
                            finish_reason=completion.finish_reason)

    def close(self) -> None:
        del self.llm
