# The two commands of the README. Both create .venv from the project's files first if it is missing or stale.
.PHONY: demo test test-multinode env

env:
	bash scripts/setup_env.sh

# The main job on its embedded default: a tiny CPU run that visibly learns (see README "Main job").
demo: env
	bash scripts/run_demo.sh $(ARGS)

# The whole test suite (what CI runs).
test: env
	bash scripts/run_tests.sh $(ARGS)

# The multi-node cluster tests: a real 2-node Ray cluster on 127.0.0.1 (docs/CLUSTER.md); not part of `make test`.
test-multinode: env
	bash scripts/run_tests.sh -m multinode tests/launch $(ARGS)
