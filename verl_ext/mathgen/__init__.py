"""A generated math task (DeepMind's ``mathematics_dataset``) sized for a small pretrained instruct model.

- ``task``: the modules, the difficulty knob, verl parquet splits, the constant-answer baseline, a CLI
  (``python -m verl_ext.mathgen.task OUT_DIR``), ``TaskSpec`` (the parameters); docs/MATHGEN.md.
- ``canonical``: ``canonical_form(question)``, the computation a question asks for; held-out splits are
  disjoint from training by it.
- ``prompts``: the chat prompt of a row: ``INSTRUCTION`` and the worked demonstrations a mix starts with.
- ``cache``: ``ensure_task(TaskSpec)``, the task written once per parameter set into the project cache, and
  ``ensure_large_heldout(TaskSpec, size)``, its large held-out split (1,024 rows, disjoint by meaning from both).
- ``compat``: the shims that let mathematics-dataset 1.0.1 import and generate reproducibly with current sympy,
  each with a probe that says when it can go.
"""
