#!/usr/bin/env bash
# The main job on its embedded default: builds the tiny assets if needed, then trains on CPU. Extra arguments are
# Hydra overrides, e.g. `bash scripts/run_demo.sh trainer.total_training_steps=10`.
set -euo pipefail
cd "$(dirname "$0")/.."
ASSETS=$(.venv/bin/python -m verl_ext.toy.assets | tail -1)
OUT=${OUT:-outputs/demo}
mkdir -p "$OUT"
exec .venv/bin/python -m verl.trainer.main_ppo hydra.searchpath=[pkg://verl_ext.config] +backend=cpu \
  algorithm.adv_estimator=grpo algorithm.norm_adv_by_std_in_grpo=false \
  data.train_files="$ASSETS/data/train.parquet" data.val_files="$ASSETS/data/val.parquet" \
  data.train_batch_size=8 data.max_prompt_length=64 data.max_response_length=16 \
  actor_rollout_ref.model.path="$ASSETS/model" \
  actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.optim.lr=1e-3 \
  actor_rollout_ref.rollout.n=8 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
  reward.custom_reward_function.path=pkg://verl_ext.toy.task reward.custom_reward_function.name=compute_score \
  trainer.logger=[console] trainer.total_training_steps=30 trainer.val_before_train=true trainer.test_freq=10 \
  trainer.save_freq=-1 trainer.project_name=verl_ext_demo trainer.experiment_name=grpo_cpu \
  trainer.default_local_dir="$OUT/ckpt" +ray_kwargs.ray_init._temp_dir=/tmp/verl_ext_ray "$@"
