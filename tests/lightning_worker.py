"""One rank of test_lightning.py's DDP check, started by torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/lightning_worker.py --out DIR [--device cuda]

Trains a tiny PPO run on CartPole and a tiny Tag run (two policies) through Lightning's
``Trainer(strategy="ddp")``, gathering every rank's parameters after each training step, then the
same runs with the trainers' own ``train`` in the same process group (what ``gpu-marl-train``
runs under torchrun); writes ``DIR/rank<r>.json``: per case, the training steps whose
parameters differed between the ranks, a digest of this rank's first observations (the ranks'
envs must differ), and whether Lightning's parameters and history equal ``train``'s.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from gpu_marl_envs.baselines import multi_agent, ppo
from gpu_marl_envs.baselines.distributed import teardown
from lightning.pytorch.strategies import DDPStrategy

# A rank left waiting in a collective (another rank stuck or dead) fails after this long with
# NCCL's or gloo's message naming the collective, rather than holding the test until its timeout.
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=120)

CASES = {
    "ppo": (
        ppo,
        "CartPole-v1",
        ppo.PPOConfig(
            num_envs=4, num_steps=16, total_timesteps=2 * 4 * 16 * 4, num_minibatches=2, update_epochs=2, hidden=(16,)
        ),
    ),
    "tag": (
        multi_agent,
        "TagContinuous-v0",
        multi_agent.MultiAgentConfig.from_dict(
            {
                "hyperparameters": {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 2 * 8 * 3},
                "groups": {"taggers": "taggers", "runners": "runners"},
                "policies": {
                    "taggers": {"algorithm": "ppo", "hidden": [8], "num_minibatches": 2, "update_epochs": 1},
                    "runners": {"algorithm": "a2c", "hidden": [8]},
                },
                "env_params": {"num_taggers": 1, "num_runners": 2, "num_other_agents_observed": 2},
            }
        ),
    ),
}


def flat(modules) -> torch.Tensor:
    """The modules' parameters in one tensor on their device (NCCL gathers only CUDA tensors)."""
    return torch.cat([p.detach().reshape(-1) for module in modules for p in module.parameters()])


class CompareRanks(pl.Callback):
    """After every training step: whether every rank holds this rank's parameters."""

    def __init__(self):
        self.steps, self.mismatched = 0, []

    def on_train_start(self, trainer, module):
        obs = module.run.obs if hasattr(module.run, "obs") else next(iter(module.run.inputs.values())).obs
        self.first_obs = hashlib.sha1(obs.cpu().numpy().tobytes()).hexdigest()

    def on_train_batch_end(self, trainer, module, *args):
        mine = flat(module.networks)
        everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, mine)
        if not all(torch.equal(mine, other) for other in everyone):
            self.mismatched.append(self.steps)
        self.steps += 1


def progress(message: str) -> None:
    """A line on stderr, which the test shows if the run fails or times out."""
    print(f"rank {dist.get_rank()}: {message}", file=sys.stderr, flush=True)


def strip(history):
    return [{key: value for key, value in entry.items() if not key.endswith("seconds")} for entry in history]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    from gpu_marl_envs.baselines.lightning import training_module

    result = {}
    for name, (trainer_module, env_id, config) in CASES.items():
        module, compare = training_module(env_id, config), CompareRanks()
        trainer = pl.Trainer(
            accelerator="gpu" if args.device == "cuda" else "cpu",
            devices=2,
            strategy=DDPStrategy(timeout=COLLECTIVE_TIMEOUT),
            max_epochs=1,
            log_every_n_steps=1,
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            callbacks=[compare],
        )
        trainer.fit(module)
        progress(f"{name}: Lightning's fit done")
        trained, history = trainer_module.train(env_id, config, device=args.device, log_every=1, log=None)
        progress(f"{name}: train() done")
        trained = trained.values() if isinstance(trained, dict) else [trained]
        result[name] = {
            "steps": compare.steps,
            "mismatched": compare.mismatched,
            "first_obs": compare.first_obs,
            "global_step": trainer.global_step,
            "iterations": module.next_iteration,
            # On the CPU: Lightning's strategies move the module there when a fit ends.
            "same_as_train": torch.equal(flat(module.networks).cpu(), flat(trained).cpu()),
            "same_history": strip(module.history) == strip(history),
        }
    (Path(args.out) / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    teardown()  # every rank leaves the process group together (not at interpreter exit, one by one)


if __name__ == "__main__":
    main()
