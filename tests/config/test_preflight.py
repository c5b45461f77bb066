"""Bad input fails in the driver, in seconds, naming the key, before Ray starts (issue 23); good presets pass unchanged.

The table runs each bad input through the same check the drivers run (`check` of recipe.fast_dapo.main and
recipe.composer.main, `prepare` + `agent_check` of verl_ext.trainer.agent_main, the campaign's and the job submission's
pre-flight) on a config composed in-process; a few representative rows run the real drivers as subprocesses to show
the whole thing: exit code 2, the key in the message, under 20 s, and no Ray session started. Bad data and model
files are small files written here; the good ones are the tiny assets.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import tiny_run_overrides
from verl_ext.config.compose import compose_config
from verl_ext.config.errors import ConfigError
from verl_ext.config.preflight import check_composed, translate_check_flag

ROOT = Path(__file__).resolve().parents[2]
PRESET = {"fast_dapo": ["+preset=cpu_demo"], "composer": ["+preset=cpu_demo", "+arm=baseline"]}
LOOP = "actor_rollout_ref.rollout.agent.default_agent_loop=external_agent"
AGENT_CMD = f"+external_agent.command='{sys.executable} -m verl_ext.agent.examples.guess_agent'"
SUBPROCESS_LIMIT_S = 20.0
HYDRA_DIR = "hydra.run.dir={tmp}/hydra"  # the drivers' Hydra output under the test's tmp_path
FAST_DAPO = ["-m", "recipe.fast_dapo.main", "+preset=cpu_demo", HYDRA_DIR]
COMPOSER = ["-m", "recipe.composer.main", "+preset=cpu_demo", "+arm=baseline", HYDRA_DIR]


def _chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _write(path: Path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture(scope="module")
def bad(tmp_path_factory, tiny_assets) -> dict[str, str]:
    """Small broken inputs: data files, model directories, a reward module."""
    d = tmp_path_factory.mktemp("bad")
    row = {"data_source": "toy_copy_digit", "prompt": _chat("Copy the digit 3."), "reward_model": {"ground_truth": "3"}}
    files = {
        "no_prompt": _write(d / "no_prompt.parquet", [{k: v for k, v in row.items() if k != "prompt"}] * 20),
        "string_prompt": _write(d / "string_prompt.parquet", [{**row, "prompt": "Copy the digit 3."}] * 20),
        "bad_role": _write(d / "bad_role.parquet", [{**row, "prompt": [{"role": "robot", "content": "hi"}]}] * 20),
        "no_reward": _write(d / "no_reward.parquet", [{"data_source": "toy", "prompt": _chat("Copy 3.")}] * 20),
        "no_gt": _write(d / "no_gt.parquet", [{**row, "reward_model": {"style": "rule"}}] * 20),
        "no_data_source": _write(d / "no_ds.parquet", [{k: v for k, v in row.items() if k != "data_source"}] * 20),
        "three_rows": _write(d / "three_rows.parquet", [row] * 3),
    }
    (d / "text.parquet").write_text("this is not parquet\n")
    files["not_parquet"] = str(d / "text.parquet")
    (d / "data.csv").write_text("prompt\nhi\n")
    files["csv"] = str(d / "data.csv")
    (d / "reward.py").write_text("def score(text):\n    return 0.0\n\nNOT_A_FUNCTION = 3\n")
    files["reward_py"] = str(d / "reward.py")
    model = Path(tiny_assets.model_dir)
    no_tok = d / "model_no_tokenizer"
    no_tok.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model / name, no_tok / name)
    files["model_no_tokenizer"] = str(no_tok)
    no_cfg = d / "model_no_config"
    shutil.copytree(model, no_cfg)
    (no_cfg / "config.json").unlink()
    files["model_no_config"] = str(no_cfg)
    return files


# (recipe, overrides with {name} placeholders for the files above, text the error must contain: the key and value)
BAD_ROWS = [
    # the table, in its order
    ("fast_dapo", ["actor_rollout_ref.rollout.n=1"], "n must be >= 2"),
    (
        "fast_dapo",
        ["curriculum.mode=fsat"],
        "curriculum.mode must be one of ['fast', 'dapo'], got 'fsat' (did you mean",
    ),
    ("fast_dapo", ["data.train_batch_size=0"], "data.train_batch_size"),
    ("fast_dapo", ["+curriculum.typo_key=3"], "unknown curriculum keys ['typo_key']"),
    ("fast_dapo", ["+algorithm.advantage_mode=nonexistent.module.fn"], "advantage_mode have no effect with"),
    (
        "fast_dapo",
        ["algorithm.adv_estimator=composable", "+algorithm.advantage_mode=nonexistent.module.fn"],
        "nonexistent.module.fn",
    ),
    ("fast_dapo", ["algorithm.adv_estimator=nonexistent"], "algorithm.adv_estimator='nonexistent' is not in verl"),
    ("fast_dapo", ["reward.custom_reward_function.path=pkg://verl_ext.toy.nope"], "path='pkg://verl_ext.toy.nope'"),
    ("fast_dapo", ["reward.custom_reward_function.name=nope"], "reward.custom_reward_function.name='nope'"),
    ("fast_dapo", ["data.max_response_length=-5"], "data.max_response_length=-5 must be >= 1"),
    ("fast_dapo", ["actor_rollout_ref.actor.optim.lr=-1"], "actor_rollout_ref.actor.optim.lr=-1.0 must be"),
    ("fast_dapo", ["data.train_files=/nonexistent.parquet"], "data.train_files: '/nonexistent.parquet' does not"),
    ("fast_dapo", ["data.train_files={no_prompt}"], "has no 'prompt' column (data.prompt_key)"),
    ("fast_dapo", ["data.train_files={not_parquet}"], "is not a readable parquet file"),
    ("fast_dapo", ["actor_rollout_ref.model.path=/nonexistent_model"], "'/nonexistent_model': no such local dir"),
    ("fast_dapo", ["trainer.total_training_steps=0"], "trainer.total_training_steps=0 trains nothing"),
    # more found while building the check
    ("fast_dapo", ["trainer.total_training_steps=-3"], "trainer.total_training_steps=-3 must be >= 1"),
    ("fast_dapo", ["trainer.total_epochs=0"], "trainer.total_epochs=0 must be >= 1"),
    ("fast_dapo", ["data.max_prompt_length=0"], "data.max_prompt_length=0 must be >= 1"),
    ("fast_dapo", ["data.max_response_length=1000"], "exceeds the model's max_position_embeddings=512"),
    ("fast_dapo", ["actor_rollout_ref.rollout.temperature=-1"], "actor_rollout_ref.rollout.temperature=-1.0"),
    ("fast_dapo", ["trainer.pass_at_k=-2"], "trainer.pass_at_k must be >= 0, got -2"),
    ("composer", ["trainer.pass_at_k=1.5"], "trainer.pass_at_k must be an integer or null, got 1.5"),
    ("fast_dapo", ["actor_rollout_ref.actor.ppo_mini_batch_size=0"], "ppo_mini_batch_size=0 must be >= 1"),
    (
        "fast_dapo",
        ["reward.custom_reward_function.path={reward_py}", "reward.custom_reward_function.name=score"],
        "cannot be called as verl calls it",
    ),
    (
        "fast_dapo",
        ["reward.custom_reward_function.path={reward_py}", "reward.custom_reward_function.name=NOT_A_FUNCTION"],
        "name='NOT_A_FUNCTION' in",
    ),
    ("fast_dapo", ["reward.custom_reward_function.path=/no/such/reward.py"], "path='/no/such/reward.py' does not"),
    ("fast_dapo", ["data.train_files={string_prompt}"], "the first row's prompt is a plain string"),
    ("fast_dapo", ["data.train_files={bad_role}"], "prompt message 0 is not a chat message"),
    ("fast_dapo", ["data.val_files={no_gt}"], "'reward_model' must be a struct with a 'ground_truth' field"),
    ("fast_dapo", ["data.val_files={no_data_source}"], "has no 'data_source' column"),
    ("fast_dapo", ["data.train_files={three_rows}"], "holds 3 rows, fewer than one batch of data.gen_batch_size=16"),
    ("fast_dapo", ["data.train_files={csv}"], "reads .parquet, .json and .jsonl files only"),
    ("fast_dapo", ["actor_rollout_ref.model.path={model_no_tokenizer}"], "no tokenizer in"),
    ("fast_dapo", ["actor_rollout_ref.model.path={model_no_config}"], "no config.json in"),
    ("fast_dapo", ["actor_rollout_ref.model.path=./models/mine"], "'./models/mine': no such local directory"),
    ("fast_dapo", ["data.custom_cls.path=pkg://no.such.module", "data.custom_cls.name=X"], "data.custom_cls.path"),
    (
        "fast_dapo",
        [
            "actor_rollout_ref.actor.use_prefix_grouper=true",
            "actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2",
        ],
        "use_prefix_grouper=true needs actor_rollout_ref.model.override_config.attn_implementation in ['eager', "
        "'sdpa'], got 'flash_attention_2'",
    ),
    (
        "fast_dapo",
        ["actor_rollout_ref.actor.use_prefix_grouper=true", "trainer.n_gpus_per_node=16"],
        "data.train_batch_size=8 groups must divide evenly over the 16 data-parallel ranks",
    ),
    (
        "fast_dapo",
        ["actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16"],
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype must be fp32 on the CPU backend, got 'bf16'",
    ),
    (
        "fast_dapo",
        ["~actor_rollout_ref.ref.fsdp_config.mixed_precision"],
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype must be fp32 on the CPU backend, got None",
    ),
    ("fast_dapo", ["actor_rollout_ref.actor.fsdp_config.model_dtype=bf16"], "model_dtype must be fp32 on the CPU"),
    ("composer", ["algorithm.adv_estimator=grpo"], "needs algorithm.adv_estimator=grpo_composer, got 'grpo'"),
    ("composer", ["data.val_files={not_parquet}"], "data.val_files: '"),
    ("composer", ["actor_rollout_ref.actor.optim.lr=0"], "actor_rollout_ref.actor.optim.lr=0.0 must be"),
    ("composer", ["trainer.total_training_steps=0"], "trainer.total_training_steps=0 trains nothing"),
    ("composer", ["reward.custom_reward_function.name=nope"], "reward.custom_reward_function.name='nope'"),
]


def _fill(overrides: list[str], bad: dict[str, str]) -> list[str]:
    return [o.format(**bad) for o in overrides]


def _driver_check(recipe: str):
    """The recipe driver's `check`, which a campaign or a job submission hands to the pre-flight."""
    return importlib.import_module(f"recipe.{recipe}.main").check


def _check(recipe: str, overrides: list[str]):
    cfg = compose_config(recipe, PRESET[recipe] + overrides, config_module=f"recipe.{recipe}.config")
    return check_composed(recipe, _driver_check(recipe), cfg)


@pytest.mark.parametrize("recipe, overrides, message", BAD_ROWS, ids=lambda x: x if isinstance(x, str) else None)
def test_bad_input_is_a_config_error_naming_the_key(bad, recipe, overrides, message):
    with pytest.raises(ValueError) as e:
        _check(recipe, _fill(overrides, bad))
    assert message in str(e.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as e:
        _check(
            "fast_dapo",
            [
                "algorithm.adv_estimator=nonexistent",
                "data.max_response_length=-5",
                "actor_rollout_ref.actor.optim.lr=-1",
                "data.train_files=/nonexistent.parquet",
                "actor_rollout_ref.model.path=/nonexistent_model",
            ],
        )
    text = str(e.value)
    for key in ("adv_estimator", "max_response_length", "optim.lr", "data.train_files", "model.path"):
        assert key in text, text
    assert text.count("\n- ") == 5


def test_a_dataset_class_that_accepts_string_prompts_takes_them(bad):
    """The dataset class says so itself (`accepts_string_prompts = True`); verl's RLHFDataset does not."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ext.config.preflight.file_checks import accepts_string_prompts
    from verl_ext.dataset.raw_prompt import RawPromptRLHFDataset

    assert accepts_string_prompts(RawPromptRLHFDataset) and not accepts_string_prompts(RLHFDataset)
    raw = ["data.custom_cls.path=pkg://verl_ext.dataset.raw_prompt", "data.custom_cls.name=RawPromptRLHFDataset"]
    plan = _check("fast_dapo", [f"data.train_files={bad['string_prompt']}", *raw])
    assert plan.first_prompt.endswith("tokens (data.max_prompt_length 64)")


def test_the_plan_says_whose_estimator_it_is():
    """The project's estimators (registered by its plugin, defined in verl_ext) and verl's, told apart by where the
    registered function is defined, not by a list of names."""
    from omegaconf import OmegaConf

    from verl_ext.advantage.config import ESTIMATORS
    from verl_ext.config.preflight.config_checks import check_estimator

    def label(name: str) -> str:
        return check_estimator(OmegaConf.create({"algorithm": {"adv_estimator": name}}))

    for name in [*ESTIMATORS, "grpo_composer"]:
        assert label(name) == f"{name} (verl-ext)"
    assert label("grpo") == "grpo (verl)" and label("gae") == "gae (verl)"


def test_val_only_may_run_zero_steps_and_a_hub_id_is_taken_as_such():
    plan = _check("fast_dapo", ["trainer.total_training_steps=0", "trainer.val_only=true"])
    assert plan.steps == "validation only (trainer.val_only=true)"
    # A hub id is not a local path: it is named as such and not fetched (no network here).
    plan = _check("fast_dapo", ["actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-1.5B"])
    assert "Hugging Face hub id" in plan.model


def test_the_plan_of_the_demo_preset(tiny_assets):
    plan = _check("fast_dapo", [])
    assert plan.model.startswith(f"{tiny_assets.model_dir} (local qwen2")
    rows = {d.key: d.rows for d in plan.data}
    assert rows == {"data.train_files": 512, "data.val_files": 100}
    assert plan.steps.startswith("20 (trainer.total_training_steps); 64 steps per epoch")  # 512 prompts / 8
    assert plan.batch.startswith("8 prompts x 8 responses = 64 rows per step")  # N = n + n_continue = 4 + 4
    assert plan.estimator == "grpo (verl)" and plan.reward == "pkg://verl_ext.toy.task:compute_score"
    assert plan.first_prompt.endswith("tokens (data.max_prompt_length 64)")
    assert "mode='fast'" in plan.settings
    # the CPU backend's run: its estimated peak host memory beside what the machine has free (test_preflight_memory)
    assert plan.memory.startswith("~") and plan.memory.endswith("GiB available now")
    assert f"  memory     {plan.memory}" in plan.render().splitlines()


def test_a_model_the_memory_estimate_cannot_size_still_runs(tiny_assets, tmp_path):
    """A model whose config.json lacks a size the estimate reads (an architecture named otherwise) is not estimated:
    the plan says which key, and the run is not refused for it."""
    model = tmp_path / "model"
    shutil.copytree(tiny_assets.model_dir, model)
    config = json.loads((model / "config.json").read_text())
    del config["intermediate_size"]
    (model / "config.json").write_text(json.dumps(config))
    plan = _check("fast_dapo", [f"actor_rollout_ref.model.path={model}"])
    assert plan.memory == "not estimated: the model's config.json has no 'intermediate_size'"


def test_the_heldout_set_is_checked_like_the_data(tiny_assets, tmp_path):
    """`trainer.heldout.files` (the large held-out evaluation) is read before Ray starts, as data.val_files is."""
    with pytest.raises(ConfigError, match=r"trainer.heldout.files: '.*missing.parquet' does not exist"):
        _check("fast_dapo", [f"+trainer.heldout.files={tmp_path / 'missing.parquet'}"])
    with pytest.raises(ConfigError, match=r"trainer.heldout.at must be one of \['first', 'last'\], got \['middle'\]"):
        _check("fast_dapo", [f"+trainer.heldout.files={tiny_assets.val_file}", "+trainer.heldout.at=[middle]"])
    plan = _check("fast_dapo", [f"+trainer.heldout.files={tiny_assets.val_file}"])
    assert {d.key: d.rows for d in plan.data}["trainer.heldout.files"] == 100


# ------------------------------------------------------------------------------------------------- agent driver
def _agent(tiny_assets, tmp_path, *extra):
    from verl_ext.trainer.agent_main import agent_check, prepare

    base = [*tiny_run_overrides(tiny_assets, tmp_path, 2), "algorithm.adv_estimator=grpo", LOOP, AGENT_CMD]
    cfg, settings = prepare([*base, *extra])
    return agent_check(settings)(cfg)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["+external_agent.timeout_s=-1"], "external_agent.timeout_s must be > 0"),
        (["+external_agent.max_inflight=0"], "external_agent.max_inflight must be >= 1"),
        (["+external_agent.mode=later"], "external_agent.mode must be one of"),
        (["algorithm.adv_estimator=gae"], "critic.model.path='~/models/deepseek-llm-7b-chat': no such local"),
        (["actor_rollout_ref.model.path=/no/model"], "actor_rollout_ref.model.path='/no/model': no such local"),
        (["+external_agent.score_source=reward_fn", "data.train_files={no_reward}"], "has no 'reward_model' column"),
        (["algorithm.adv_estimator=nonexistent"], "algorithm.adv_estimator='nonexistent'"),
    ],
)
def test_agent_driver_rejects(bad, tiny_assets, tmp_path, extra, message):
    with pytest.raises(ValueError) as e:
        _agent(tiny_assets, tmp_path, *_fill(extra, bad))
    assert message in str(e.value)


def test_an_agent_that_posts_its_score_needs_no_ground_truth(bad, tiny_assets, tmp_path):
    plan = _agent(tiny_assets, tmp_path, f"data.train_files={bad['no_reward']}", f"data.val_files={bad['no_reward']}")
    assert {d.rows for d in plan.data} == {20}


# --------------------------------------------------------------------------------------- campaign and cluster job
def _spec(conditions: dict[str, list[str]], entry="recipe.fast_dapo.main"):
    from verl_ext.campaign import CampaignSpec

    return CampaignSpec.from_dict(
        {"name": "c", "entry": entry, "base": ["+preset=cpu_demo"], "conditions": conditions, "seeds": [0, 1]}
    )


def test_campaign_check_names_the_failing_condition_and_key(tmp_path):
    from verl_ext.campaign.check import check_campaign

    spec = _spec(
        {
            "ok": [],
            "typo": ["algorithm.adv_estimator=gtpo_sepaa"],
            "lr": ["actor_rollout_ref.actor.optim.lr=-1"],
            "nokey": ["trainer.no_such_key=1"],
        }
    )
    errors = check_campaign(spec, spec.runs(tmp_path))
    assert sorted(errors) == ["lr", "nokey", "typo"]
    assert "algorithm.adv_estimator='gtpo_sepaa'" in errors["typo"]
    assert "actor_rollout_ref.actor.optim.lr=-1.0" in errors["lr"]
    assert "trainer.no_such_key" in errors["nokey"]
    assert check_campaign(_spec({"x": []}, entry="my.own.entry"), []) == {}  # not a project recipe: not checked


def test_job_submission_runs_the_check_before_contacting_a_cluster():
    from verl_ext.launch import job

    req = job.JobRequest("fast_dapo", ["+preset=cpu_demo", "reward.custom_reward_function.name=nope"], "/shared/r")
    with pytest.raises(job.JobError, match="reward.custom_reward_function.name='nope'"):
        job.validate(req)
    # Paths that exist on the cluster's storage only: preflight="config" leaves the files out, checks the rest.
    remote = ["+preset=cpu_demo", "data.train_files=/cluster/only/train.parquet"]
    assert job.validate(job.JobRequest("fast_dapo", remote, "/shared/r", preflight="config"))
    with pytest.raises(job.JobError, match="'/cluster/only/train.parquet' does not exist"):
        job.validate(job.JobRequest("fast_dapo", remote, "/shared/r"))


# --------------------------------------------------------------------------------------------- good presets pass
def _presets(recipe: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "recipe" / recipe / "config" / "preset").glob("*.yaml"))


def _files_here(cfg) -> str:
    """ "full" if the config's data files exist on this machine, else "config" (GPU presets name cluster paths)."""
    from omegaconf import OmegaConf

    from verl_ext.trainer.launch import register_lazy_resolvers

    register_lazy_resolvers()
    paths = OmegaConf.to_container(cfg.data, resolve=True)["train_files"]
    paths = paths if isinstance(paths, list) else [paths]
    return "full" if all(Path(os.path.expanduser(p)).exists() for p in paths) else "config"


SERVED_TEACHERS = "composer.replay.teacher_pool.teachers=${served_teachers:}"


def _composer_runs() -> list[tuple[str, list[str]]]:
    """Every Composer preset with every arm; the arms with replay on a preset without teachers of its own (the real
    ones: theirs are served, with ports chosen at start) take the served teachers."""
    runs = []
    for preset in _presets("composer"):
        for arm in ("baseline", "sdpo", "replay", "full"):
            served = arm in ("replay", "full") and preset != "cpu_demo"
            runs.append(("composer", [f"+preset={preset}", f"+arm={arm}", *([SERVED_TEACHERS] if served else [])]))
    return runs


@pytest.mark.parametrize(
    "recipe, overrides",
    [("fast_dapo", [f"+preset={p}"]) for p in _presets("fast_dapo")] + _composer_runs(),
    ids=lambda x: x if isinstance(x, str) else "-".join(x[:2]),
)
def test_good_presets_pass_unchanged(recipe, overrides, served_teachers):
    cfg = compose_config(recipe, overrides, config_module=f"recipe.{recipe}.config")
    files = _files_here(cfg)
    if any(name in overrides[0] for name in ("cpu_demo", "tiny", "real")):
        assert files == "full"  # the CPU presets' files are all here (built on first use): everything is checked
    plan = check_composed(recipe, _driver_check(recipe), cfg, files=files)
    assert plan.estimator != "-" and plan.batch != "-"


@pytest.mark.parametrize("spec_file", sorted((ROOT / "configs" / "campaign").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_campaign_conditions_pass(spec_file, tmp_path, served_teachers):
    from verl_ext.campaign import CampaignSpec
    from verl_ext.campaign.check import check_campaign

    spec = CampaignSpec.from_yaml(spec_file)
    plans = spec.runs(tmp_path)
    recipe = spec.entry.split(".")[1]
    cfg = compose_config(recipe, plans[0].overrides, config_module=f"recipe.{recipe}.config")
    assert check_campaign(spec, plans, files=_files_here(cfg)) == {}


# --------------------------------------------------------------------------------------- the drivers, for real
def _run_driver(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a driver as a user would; Ray's session directory goes under tmp_path, so it exists iff Ray started."""
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path / "ray")}
    args = [a.format(tmp=tmp_path) for a in args]
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{args[:2]}: exit {r.returncode}, {wall:.1f} s wall, {cpu:.1f} s CPU")
    assert not (tmp_path / "ray").exists(), "Ray was started"
    # Most of the time is importing verl, torch and transformers (~11 s CPU here). The CPU time bounds what the
    # user waits on an idle machine; the wall clock is only meaningful when the machine is not oversubscribed.
    assert cpu < SUBPROCESS_LIMIT_S, f"{cpu:.1f} s CPU"
    if os.getloadavg()[0] <= (os.cpu_count() or 1):
        assert wall < SUBPROCESS_LIMIT_S, f"{wall:.1f} s wall"
    return r


@pytest.mark.parametrize(
    "args, message",
    [
        ([*FAST_DAPO, "algorithm.adv_estimator=nonexistent"], "algorithm.adv_estimator='nonexistent'"),
        (
            [*COMPOSER, "data.train_files=/no.parquet"],
            "data.train_files: '/no.parquet' does not exist",
        ),
        (
            ["-m", "verl_ext.trainer.agent_main", LOOP, "+external_agent.command=/no/such/agent"],
            "external_agent.command",
        ),
    ],
    ids=["fast_dapo", "composer", "agent"],
)
def test_drivers_exit_2_in_seconds_without_ray(tmp_path, args, message):
    r = _run_driver(args, tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert message in r.stderr and "bad config, nothing started" in r.stderr


def test_check_command_prints_the_plan_and_exits_0(tmp_path):
    r = _run_driver([*FAST_DAPO, "--check"], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    for line in ("[preflight] fast_dapo: the run's plan", "data.train_files", "(512 rows)", "64 rows per step"):
        assert line in r.stdout
    assert "check passed; check_only=true, so nothing was started" in r.stdout


def test_check_flag_becomes_the_override():
    assert translate_check_flag(["m.py", "--check", "a=1"]) == ["m.py", "a=1", "+check_only=true"]
    assert translate_check_flag(["m.py", "a=1"]) == ["m.py", "a=1"]


def test_campaign_script_stops_before_the_first_run(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "c",
                "entry": "recipe.fast_dapo.main",
                "base": ["+preset=cpu_demo"],
                "conditions": {"ok": [], "typo": ["algorithm.adv_estimator=gtpo_sepaa"]},
                "seeds": [0],
            }
        )
    )
    r = _run_driver(["scripts/campaign.py", str(spec), "--out-root", str(tmp_path / "out")], tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "condition 'typo' fails the pre-flight check" in r.stderr and "gtpo_sepaa" in r.stderr
    # nothing ran: no run's directory; the campaign's own log keeps what the pre-flight printed
    assert [p.name for p in (tmp_path / "out" / "c").iterdir()] == ["run.log"]
