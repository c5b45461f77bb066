"""Raw-string prompts through verl's own RLHFDataset and agent-loop machinery, with the tiny tokenizer/model."""

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.conftest import dataset_config
from verl_ext.dataset.prompt_ids import prompt_token_ids, raw_text_ids

PROMPTS = [
    "What is 2 + 3? Let's think step by step and output the final answer within \\boxed{}.",
    "Compute $\\frac{1}{2} + \\frac{1}{3}$. Let's think step by step and output the final answer within \\boxed{}.",
    "x" * 900,  # too long for max_prompt_length below
]


def _write(path, prompts, chat: bool):
    if chat:
        col = pa.array([[{"role": "user", "content": p}] for p in prompts])
    else:
        col = pa.array(prompts, pa.string())
    n = len(prompts)
    pq.write_table(
        pa.table(
            {
                "data_source": ["t"] * n,
                "prompt": col,
                "reward_model": [{"style": "rule", "ground_truth": "5"}] * n,
                "extra_info": [{"index": i} for i in range(n)],
            }
        ),
        path,
    )
    return str(path)


def test_stock_rlhf_dataset_drops_every_string_prompt(tmp_path, tiny_tokenizer):
    # The reason RawPromptRLHFDataset exists: verl applies the chat template to a string, fails, drops the row.
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = _write(tmp_path / "raw.parquet", PROMPTS[:2], chat=False)
    assert len(RLHFDataset(path, tiny_tokenizer, dataset_config(tmp_path))) == 0


def test_raw_dataset_filters_by_raw_length_and_passes_strings(tmp_path, tiny_tokenizer):
    from verl.utils.dataset.rl_dataset import collate_fn

    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset

    lengths = [len(tiny_tokenizer(p)["input_ids"]) for p in PROMPTS]
    max_len = max(lengths[:2])
    assert lengths[2] > max_len
    path = _write(tmp_path / "raw.parquet", PROMPTS, chat=False)
    ds = RawPromptRLHFDataset(path, tiny_tokenizer, dataset_config(tmp_path, max_len=max_len))
    assert len(ds) == 2
    items = [ds[i] for i in range(len(ds))]
    assert [it["raw_prompt"] for it in items] == PROMPTS[:2]
    batch = collate_fn(items)
    assert batch["dummy_tensor"].shape == (2, 1)
    assert list(batch["raw_prompt"]) == PROMPTS[:2]

    no_filter = RawPromptRLHFDataset(path, tiny_tokenizer, dataset_config(tmp_path, max_len=max_len, filter_on=False))
    assert len(no_filter) == 3


def test_raw_dataset_matches_stock_for_chat_prompts(tmp_path, tiny_tokenizer):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset

    path = _write(tmp_path / "chat.parquet", PROMPTS, chat=True)
    cfg = dataset_config(tmp_path, max_len=80)
    ours, stock = RawPromptRLHFDataset(path, tiny_tokenizer, cfg), RLHFDataset(path, tiny_tokenizer, cfg)
    assert len(ours) == len(stock) == 2
    assert [ours[i]["raw_prompt"] for i in range(2)] == [stock[i]["raw_prompt"] for i in range(2)]


def test_prompt_token_ids_forms(tiny_tokenizer):
    text = PROMPTS[0]
    assert prompt_token_ids(tiny_tokenizer, text) == raw_text_ids(tiny_tokenizer, text)
    assert tiny_tokenizer.decode(raw_text_ids(tiny_tokenizer, text)) == text
    chat = [{"role": "user", "content": text}]
    rendered = tiny_tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert tiny_tokenizer.decode(prompt_token_ids(tiny_tokenizer, chat)) == rendered
    assert rendered != text
    with pytest.raises(TypeError):
        prompt_token_ids(tiny_tokenizer, [])
    with pytest.raises(TypeError):
        prompt_token_ids(tiny_tokenizer, [{"text": "no role"}])


def test_missing_prompt_column_is_a_clear_error(tmp_path, tiny_tokenizer):
    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset

    path = _write(tmp_path / "raw.parquet", PROMPTS[:2], chat=False)
    cfg = dataset_config(tmp_path)
    cfg.prompt_key = "question"
    with pytest.raises(KeyError, match="question"):
        RawPromptRLHFDataset(path, tiny_tokenizer, cfg)


class _HFGenerateServer:
    """Stands in for verl's LLM server client: greedy generation with the real tiny model, in process."""

    def __init__(self, model, max_new_tokens):
        self.model, self.max_new_tokens, self.seen_prompts = model, max_new_tokens, []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.seen_prompts.append(list(prompt_ids))
        with torch.no_grad():
            out = self.model.generate(
                torch.tensor([prompt_ids]), max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=0
            )
        return TokenOutput(token_ids=out[0, len(prompt_ids) :].tolist())


@pytest.fixture(scope="module")
def agent_loop_factory(tiny_assets, tiny_tokenizer):
    import hydra
    from hydra import compose, initialize_config_module
    from transformers import AutoModelForCausalLM
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry

    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset  # importing it registers the agent loop

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(
            config_name="ppo_trainer",
            overrides=["data.max_prompt_length=48", "actor_rollout_ref.rollout.response_length=6"],
        )
    model = AutoModelForCausalLM.from_pretrained(tiny_assets.model_dir).eval()

    def make(agent_name):
        server = _HFGenerateServer(model, max_new_tokens=6)
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[agent_name],
            trainer_config=DictConfigWrap(config=config),
            server_manager=server,
            tokenizer=tiny_tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RawPromptRLHFDataset,
            data_config=DictConfigWrap(config.data),
            tools=ToolListWrap([]),
        )
        return loop, server

    return make


def _run(make, agent_name, raw_prompt):
    """Build the agent loop inside the running event loop, as verl's worker does, and run one trajectory."""
    params = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": False}

    async def go():
        loop, server = make(agent_name)
        return loop, server, await loop.run(params, raw_prompt=raw_prompt)

    return asyncio.run(go())


def test_agent_loop_encodes_string_prompt_raw(agent_loop_factory, tiny_tokenizer):
    from verl_ext.dataset.raw_prompt_agent_loop import AGENT_NAME, RawPromptAgentLoop

    loop, server, out = _run(agent_loop_factory, AGENT_NAME, PROMPTS[0])
    assert isinstance(loop, RawPromptAgentLoop)
    expected = raw_text_ids(tiny_tokenizer, PROMPTS[0])
    assert server.seen_prompts == [expected]
    assert out.prompt_ids == expected
    assert 0 < len(out.response_ids) <= 6 and out.response_mask == [1] * len(out.response_ids)


def test_agent_loop_left_truncates_long_string_prompt(agent_loop_factory, tiny_tokenizer):
    from verl_ext.dataset.raw_prompt_agent_loop import AGENT_NAME

    _, _, out = _run(agent_loop_factory, AGENT_NAME, PROMPTS[2])
    assert out.prompt_ids == raw_text_ids(tiny_tokenizer, PROMPTS[2])[-48:]


def test_agent_loop_chat_prompt_identical_to_verl(agent_loop_factory):
    from verl_ext.dataset.raw_prompt_agent_loop import AGENT_NAME

    chat = [{"role": "user", "content": PROMPTS[1]}]
    _, _, a = _run(agent_loop_factory, AGENT_NAME, chat)
    _, _, b = _run(agent_loop_factory, "single_turn_agent", chat)
    assert a.prompt_ids == b.prompt_ids and a.response_ids == b.response_ids


def test_stock_agent_loop_cannot_take_a_string(agent_loop_factory):
    with pytest.raises(TypeError):  # the chat template gets a list of characters
        _run(agent_loop_factory, "single_turn_agent", PROMPTS[0])
