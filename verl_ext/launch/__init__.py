"""Ray cluster jobs: submit a recipe to a running cluster, stream its log, collect its outputs (job.py; CLI in
cli.py, `python -m verl_ext.launch`; the job's entrypoint on the cluster in entry.py; outputs carried through the job
log by artifacts.py); a multi-node cluster on one machine for tests (local_cluster.py). docs/CLUSTER.md. A recipe's
driver run on this machine instead, as a child process: local_run.py."""
