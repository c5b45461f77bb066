"""Agent-test fixtures: the tiny model as a token-in/token-out backend (sampling with log-probs, like verl's
rollout), and a gateway on 127.0.0.1 serving it from a background event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch


class TinyModelBackend:
    """`generate(request_id, prompt_ids, sampling_params) -> (ids, log_probs)` on the real tiny model (HF,
    fp32, no KV cache: sizes are tiny). Stops at EOS or max_tokens; temperature 0 = greedy."""

    def __init__(self, model_dir, eos_id: int, seed: int = 0, delay_s: float = 0.0):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
        self.eos_id, self.delay_s = eos_id, delay_s
        self.version: int | None = None  # reported as the rollout's weight version, as verl's servers do
        self.gen = torch.Generator().manual_seed(seed)
        self.calls: list[tuple[list[int], list[int]]] = []

    @torch.no_grad()
    def sample(self, prompt_ids: list[int], max_tokens: int, temperature: float) -> tuple[list[int], list[float]]:
        ids, out, lps = list(prompt_ids), [], []
        for _ in range(max_tokens):
            logits = self.model(torch.tensor([ids])).logits[0, -1].float()
            logp = torch.log_softmax(logits / max(temperature, 1e-6), -1)
            tok = int(logp.argmax()) if temperature == 0 else int(torch.multinomial(logp.exp(), 1, generator=self.gen))
            out.append(tok)
            lps.append(float(logp[tok]))
            ids.append(tok)
            if tok == self.eos_id:
                break
        return out, lps

    async def __call__(self, request_id, prompt_ids, sampling_params):
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        ids, lps = await asyncio.get_running_loop().run_in_executor(
            None,
            self.sample,
            prompt_ids,
            int(sampling_params["max_tokens"]),
            float(sampling_params.get("temperature", 1.0)),
        )
        self.calls.append((list(prompt_ids), ids))
        return ids, (lps if sampling_params.get("logprobs") else None), self.version


class LoopThread:
    """An asyncio loop in a thread (the gateway's home, as the agent-loop worker's loop is in verl)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout=300):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="session")
def tiny_backend(tiny_assets, tiny_tokenizer):
    return TinyModelBackend(tiny_assets.model_dir, tiny_tokenizer.eos_token_id)


@pytest.fixture
def loop_thread():
    lt = LoopThread()
    yield lt
    lt.close()


def make_gateway(tokenizer, generate, **kw):
    from verl.utils.tokenizer.continuous_token_wiring import (
        create_continuous_token_builder,
    )

    from verl_ext.agent.gateway.server import Gateway

    builder = create_continuous_token_builder(tokenizer, hf_model_type="qwen2")
    args = {"model_name": "tiny", "prompt_length": 128, "response_length": 64, "api_key": "k"}
    args.update(kw)
    return Gateway(tokenizer=tokenizer, builder=builder, generate=generate, **args)


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


@pytest.fixture
def gateway(loop_thread, tiny_tokenizer, tiny_backend):
    gw = make_gateway(tiny_tokenizer, tiny_backend)
    loop_thread.run(gw.start())
    yield gw
    loop_thread.run(gw.stop())


class ScriptedBackend:
    """A rollout that "samples" scripted replies: each call pops the next text (or calls `script(prompt_text)`),
    tokenizes it with the real tokenizer, appends EOS and honours `max_tokens` and `stop` as vLLM does (generation
    ends at the token that completes a stop string; that token is still returned). Log-probs are fixed numbers
    (-0.01 * position - 0.1) so a test can tell every sampled token's own log-prob apart. Records every call."""

    def __init__(self, tokenizer, script):
        self.tok, self.script = tokenizer, script
        self.calls: list[tuple[list[int], dict, list[int]]] = []

    def _next(self, prompt_ids) -> str:
        if callable(self.script):
            return self.script(self.tok.decode(prompt_ids))
        return self.script.pop(0)

    async def __call__(self, request_id, prompt_ids, sampling_params):
        text = self._next(prompt_ids)
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        ids = ids[: int(sampling_params["max_tokens"])]
        stops = sampling_params.get("stop") or []
        if stops:
            for k in range(1, len(ids) + 1):
                if any(s in self.tok.decode(ids[:k], skip_special_tokens=True) for s in stops):
                    ids = ids[:k]
                    break
        lps = [-0.1 - 0.01 * i for i in range(len(ids))]
        self.calls.append((list(prompt_ids), dict(sampling_params), ids))
        return ids, (lps if sampling_params.get("logprobs") else None), 0


@pytest.fixture(scope="session")
def tool_tokenizer(tiny_assets):
    """The tiny tokenizer with the project's current chat template (tools, hermes tool calls), whatever template
    the cached assets were built with: the gateway-level tests do not depend on the asset cache's age."""
    from transformers import AutoTokenizer

    from verl_ext.toy.tokenizer import CHAT_TEMPLATE

    tok = AutoTokenizer.from_pretrained(tiny_assets.model_dir)
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture
def scripted_gateway(loop_thread, tool_tokenizer):
    """`make(script, **gateway_kw) -> (gateway, backend)`: a started gateway over a `ScriptedBackend`."""
    made = []

    def make(script, **kw):
        backend = ScriptedBackend(tool_tokenizer, script)
        gw = make_gateway(tool_tokenizer, backend, **{"prompt_length": 2048, "response_length": 2048, **kw})
        loop_thread.run(gw.start())
        made.append(gw)
        return gw, backend

    yield make
    for gw in made:
        loop_thread.run(gw.stop())


@pytest.fixture(scope="session")
def tool_model_dir(tiny_assets, tmp_path_factory):
    """The tiny model with the project's current chat template (tools, hermes tool calls) for the end-to-end runs,
    whose tokenizer verl loads from the model path: a copy of the cached model directory with the tokenizer
    re-saved, so the runs do not depend on the template the asset cache was built with."""
    import shutil

    from transformers import AutoTokenizer

    from verl_ext.toy.tokenizer import CHAT_TEMPLATE

    dst = tmp_path_factory.mktemp("tool-model") / "model"
    shutil.copytree(tiny_assets.model_dir, dst)
    tok = AutoTokenizer.from_pretrained(dst)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(dst)
    assert AutoTokenizer.from_pretrained(dst).chat_template == CHAT_TEMPLATE
    return dst
