"""TRL's `VLLMClient`, for `sprout serve`: generation goes to sprout's `POST /generate/`
(TRL's own schema, unchanged), and weights travel as files instead of over NCCL.

TRL's trainer (server mode) pushes weights by calling `update_named_params(metadata,
named_params)` (TRL 1.x; older releases call `update_named_param(name, tensor)` once per
tensor) and then `reset_prefix_cache()`. This client gathers the tensors, writes them as
one safetensors checkpoint beside the model's config and tokenizer files, and calls
`POST /update_weights {weight_dir, weights_version}`; sprout swaps the new weights in
between two steps and drops its prefix cache. The version counts up from the one the
server has in force.

    from sprout_client import SproutClient
    client = SproutClient(base_url="http://127.0.0.1:8000", source_dir="smollm2-f32")

`source_dir` is the Hugging Face directory the trainer's model came from (its
config.json and tokenizer files are copied into each checkpoint).
"""

import json
import os
import shutil
import tempfile
import urllib.request

import torch
from safetensors.torch import save_file
from trl.generation.vllm_client import VLLMClient


class SproutClient(VLLMClient):
    def __init__(self, *args, source_dir, checkpoint_dir=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.source_dir = source_dir
        self.checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="sprout-trl-")
        self.pending = {}
        models = self._sprout_get("/v1/models")
        self.version = models["data"][0].get("weights_version", 0)

    # sprout needs no communicator: the weights go through the file system.
    def init_communicator(self, device=0):
        pass

    def close_communicator(self):
        pass

    def get_server_info(self):
        """What TRL asks a vLLM server's development endpoint: sprout's `/generate/`
        returns each token's log-prob under the model (vLLM's raw_logprobs), which equal
        the processed ones at temperature 1 with no truncation, TRL's GRPO default."""
        return {"model_config": {"logprobs_mode": "raw_logprobs"}}

    def update_named_params(self, metadata, named_params):
        for name, tensor in named_params:
            self.pending[name] = tensor.detach().to("cpu", torch.float32).contiguous()
        self._push()

    def update_named_param(self, name, weights):
        # Older TRL: one call per tensor; pushed at reset_prefix_cache().
        self.pending[name] = weights.detach().to("cpu", torch.float32).contiguous()

    def update_model_params(self, model):
        self.update_named_params(None, model.named_parameters())

    def reset_prefix_cache(self):
        if self.pending:
            self._push()
        super().reset_prefix_cache()

    def _push(self):
        """Writes the gathered tensors as a checkpoint and has sprout load it."""
        self.version += 1
        out = os.path.join(self.checkpoint_dir, f"v{self.version}")
        os.makedirs(out, exist_ok=True)
        save_file(self.pending, os.path.join(out, "model.safetensors"))
        for name in os.listdir(self.source_dir):
            if name != "model.safetensors":
                shutil.copy(os.path.join(self.source_dir, name), os.path.join(out, name))
        self.pending = {}
        answer = self._sprout_post(
            "/update_weights", {"weight_dir": out, "weights_version": self.version})
        if not answer.get("success"):
            raise RuntimeError(f"sprout refused the update: {answer}")
        previous = os.path.join(self.checkpoint_dir, f"v{self.version - 1}")
        if os.path.isdir(previous):
            shutil.rmtree(previous)

    def _sprout_get(self, path):
        with urllib.request.urlopen(self.base_url + path, timeout=60) as response:
            return json.loads(response.read())

    def _sprout_post(self, path, body):
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{path} answered {e.code}: {e.read().decode(errors='replace')}")
