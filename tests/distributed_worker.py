"""One rank of the several-process training checks in test_distributed.py, started by torchrun:

    python -m torch.distributed.run --standalone --nproc-per-node N tests/distributed_worker.py \\
        --algorithm ppo --device cpu --out DIR [--every-step]

(``--algorithm``: a single-agent trainer, or ``tag`` / ``covid``: the multi-agent trainer on
TagGridworld with a PPO and an A2C policy, and on CovidEconomy, both with small games.)

Each rank trains the first half of a tiny run, checkpointing it (rank 0 writes the file), loads
the file, resumes the finished half (which restores it and trains no more) and resumes it again at
full length, then writes what it saw to ``DIR/rank<r>.json``:
- with ``--every-step`` (CPU only: a CUDA graph replays its optimizer steps without Python), after
  every optimizer step the ranks' parameters are gathered and compared;
- digests of the first inputs of the modules' forward passes, the first one a first observation
  (the ranks' envs must differ; both games start every game alike, and the ranks differ from
  their second step, by their own sampled actions);
- whether the restored policies equal the checkpoint's;
- the histories (reduced metrics), how often ``log`` and ``save`` were called on this rank, the
  final parameters and buffers (in the ``tag`` case, the taggers' observation statistics), and
  the reductions of rank-dependent numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

import torch
import torch.distributed as dist
from gpu_marl_envs.baselines import a2c, ddpg, multi_agent, ppo
from gpu_marl_envs.baselines.checkpoint import atomic_save
from gpu_marl_envs.baselines.distributed import setup, teardown
from torch.optim.optimizer import register_optimizer_step_post_hook

CASES = {
    "ppo": (
        ppo,
        ppo.PPOConfig(
            num_envs=4, num_steps=16, total_timesteps=2 * 4 * 16 * 6, num_minibatches=2, update_epochs=2, hidden=(16,)
        ),
        "CartPole-v1",
    ),
    "a2c": (
        a2c,
        a2c.A2CConfig(num_envs=4, num_steps=5, total_timesteps=2 * 4 * 5 * 6, anneal_lr=True, hidden=(16,)),
        "Acrobot-v1",
    ),
    "ddpg": (
        ddpg,
        ddpg.DDPGConfig(
            num_envs=4, total_timesteps=2 * 4 * 6, learning_starts=16, batch_size=8, buffer_size=64, hidden=(16, 16)
        ),
        "Pendulum-v1",
    ),
    "tag": (
        multi_agent,
        multi_agent.MultiAgentConfig.from_dict(
            {
                "hyperparameters": {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 2 * 8 * 6},
                "groups": {"taggers": "taggers", "runners": "runners"},
                "policies": {
                    "taggers": {
                        "algorithm": "ppo",
                        "hidden": [16],
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "normalize_observations": True,
                    },
                    "runners": {"algorithm": "a2c", "hidden": [16]},
                },
                "env_params": {"grid_length": 4, "episode_length": 8},
            }
        ),
        "TagGridworld-v0",
    ),
    "covid": (
        multi_agent,
        multi_agent.MultiAgentConfig.from_dict(
            {
                "hyperparameters": {"num_envs": 2, "num_steps": 5, "total_timesteps": 2 * 2 * 5 * 6},
                "groups": {"planner": "planner", "governors": "governors"},
                "policies": {
                    "planner": {"algorithm": "a2c", "hidden": [16]},
                    "governors": {"algorithm": "ppo", "hidden": [16], "num_minibatches": 2, "update_epochs": 1},
                },
                "env_params": {"episode_length": 5},
            }
        ),
        "CovidEconomy-v0",
    ),
}


def modules(trained) -> dict[str, torch.nn.Module]:
    """A trainer's result as checkpoint key -> module: the single-agent trainers' one model, the
    multi-agent trainer's policies."""
    if isinstance(trained, dict):
        return {f"policy/{name}": policy for name, policy in trained.items()}
    return {"model": trained}


def flat_parameters(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).cpu() for group in optimizer.param_groups for p in group["params"]])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", choices=CASES, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", required=True)
    parser.add_argument("--every-step", action="store_true")
    parser.add_argument("--graph-allreduce", choices=("true", "false"), default="true")
    args = parser.parse_args()
    out = Path(args.out)
    context = setup(args.device)
    module, config, env_id = CASES[args.algorithm]
    # The cases' sizes are for 2 ranks: 6 iterations on any number of them.
    config = dataclasses.replace(config, total_timesteps=config.total_timesteps // 2 * context.world_size)
    if hasattr(config, "graph_allreduce"):
        config = dataclasses.replace(config, graph_allreduce=args.graph_allreduce == "true")
    seen = {"steps": 0, "mismatched_steps": [], "inputs": []}

    def compare(optimizer, *_):
        mine = flat_parameters(optimizer)
        everyone = [torch.empty_like(mine) for _ in range(context.world_size)]
        dist.all_gather(everyone, mine)
        if not all(torch.equal(mine, other) for other in everyone):
            seen["mismatched_steps"].append(seen["steps"])
        seen["steps"] += 1

    def remember_inputs(module_, inputs):
        # Not while a CUDA graph captures the pass: no copy to the host can happen then, and the
        # graph's replays read the inputs of the eager passes before it.
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            return
        if len(seen["inputs"]) < 64 and inputs and isinstance(inputs[0], torch.Tensor):
            seen["inputs"].append(hashlib.sha1(inputs[0].detach().float().cpu().numpy().tobytes()).hexdigest())

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(remember_inputs)]
    if args.every_step:
        hooks.append(register_optimizer_step_post_hook(compare))
    logged, saved = [], []

    def save(state):
        saved.append(state["iteration"])
        atomic_save(state, out / "checkpoint.pt")

    # The first half of the run, with a checkpoint at each log entry (written by rank 0 alone).
    half = dataclasses.replace(config, total_timesteps=config.total_timesteps // 2)
    _, first_history = module.train(env_id, half, device=args.device, log_every=1, log=logged.append, save=save)
    dist.barrier()  # rank 0's checkpoint is on disk
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    # Resuming a finished run restores it and trains no more: every rank holds the file's policy.
    restored, _ = module.train(env_id, half, device=args.device, log=None, resume=state)
    restored_matches = all(
        torch.equal(value.cpu(), state[key][name])
        for key, module_ in modules(restored).items()
        for name, value in module_.state_dict().items()
    )
    # Resuming it with the full length trains on.
    trained, history = module.train(
        env_id, config, device=args.device, log_every=1, log=logged.append, resume=state, save=save
    )
    for hook in hooks:
        hook.remove()
    sums, maxima = context.pool([1.0, context.rank + 1.0], {"seconds": float(context.rank)})
    reductions = {"sums": sums, "max": maxima}
    result = {
        "rank": context.rank,
        "world_size": context.world_size,
        **seen,
        "first_history": first_history,
        "restored_matches_checkpoint": restored_matches,
        "history": history,
        "logged": len(logged),
        "saved": saved,
        "reductions": reductions,
        "parameters": torch.cat(
            [p.detach().reshape(-1).cpu() for m in modules(trained).values() for p in m.parameters()]
        ).tolist(),
        "buffers": [b.reshape(-1).cpu().tolist() for m in modules(trained).values() for b in m.buffers()],
    }
    (out / f"rank{context.rank}.json").write_text(json.dumps(result))
    teardown()


if __name__ == "__main__":
    main()
