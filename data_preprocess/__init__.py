"""Data preparation for verl-ext: DAPO-Math-17k (``dapo17k``), evaluation and extra training sets
(``math_sets``), and synthetic fixtures with the real files' schemas (``fixtures``).

All writers produce verl RLHFDataset parquet files; see ``verl_schema`` for the columns and the prompt rule.
"""
