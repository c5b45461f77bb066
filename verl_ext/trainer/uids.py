"""Prompt uids: verl groups a prompt's responses by the `uid` column, one fresh uid per prompt row drawn."""

from __future__ import annotations

import uuid

import numpy as np
from verl import DataProto


def assign_uids(batch: DataProto) -> DataProto:
    """Give each row of a batch of prompts a uid of its own (before it is repeated into responses); returns it."""
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    return batch
