"""Dataset-side extensions for verl: plain-string prompts for base models (no chat template).

See ``raw_prompt`` for what verl 0.9.1 does with string prompts and the three trainer overrides that make them
work end to end; ``prompt_ids.prompt_token_ids`` gives the ids for either prompt form. Nothing to register from
the plugin: the dataset class, loaded by verl wherever it is needed, registers the agent loop.
"""
