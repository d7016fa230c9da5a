"""Which block of rows suits the fused A2C loss's kernel (``fused_a2c_loss``, issue 44)? At Tag A2C's
update (5,000,000 rows of two 21-way choices, bfloat16 logits read at a row stride of 48 as the shared
layers' output gives them), µs per forward and backward pass, CUDA events over ``--repeats`` calls
after a warm-up, for each :data:`SHAPES` (logits a program takes per component, warps), beside
PyTorch's loss (``multi_agent.masked_a2c_loss`` after ``ActorCritic``'s log-probabilities).

    python benchmarks/experiments/a2c_loss_block.py --out a2c-loss.md --json a2c-loss.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from gpu_marl_envs.baselines import fused_a2c_loss, multi_agent
from gpu_marl_envs.baselines.models import ActorCritic
from gymnasium import spaces

# The suite's modules (report) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, cuda_us, gpu_hardware, save  # noqa: E402

SHAPES = [(512, 4), (1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8)]
"""(BLOCK_ELEMENTS, WARPS) tried."""
ROWS = 5_000_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    torch.manual_seed(0)
    policy = ActorCritic(71, spaces.MultiDiscrete([21, 21]), (8,))
    config = multi_agent.PolicyConfig(algorithm="a2c", norm_adv=False, vf_coef=2.0)
    both = torch.randn(ROWS, 48, device="cuda").bfloat16().requires_grad_()
    logits, values = both[:, :42], both[:, 42]
    actions = torch.randint(0, 21, (ROWS, 2), device="cuda")
    advantages, returns = torch.randn(ROWS, device="cuda"), torch.randn(ROWS, device="cuda")
    weights = (torch.rand(ROWS, device="cuda") > 0.1).float()
    ent_coef = torch.tensor(0.05, device="cuda")

    def fused():
        loss, _ = fused_a2c_loss.categorical_a2c_loss(
            logits, values, actions, advantages, returns, weights, config, ent_coef
        )
        loss.backward()

    def pytorch():
        log_probs, entropy = policy._log_prob_and_entropy(logits, actions, None)
        loss, _ = multi_agent.masked_a2c_loss(
            log_probs, entropy, values.float(), advantages, returns, weights, config, ent_coef
        )
        loss.backward()

    results = [{"way": "PyTorch", "us": cuda_us(pytorch, args.repeats)}]
    for elements, warps in SHAPES:
        fused_a2c_loss.BLOCK_ELEMENTS, fused_a2c_loss.WARPS = elements, warps
        way = f"kernel, {elements} logits a program, {warps} warps"
        results.append({"way": way, "us": cuda_us(fused, args.repeats)})
    lines = [
        f"Hardware: {hardware}. A2C's loss, forward and backward, {ROWS:,} rows of 2 x 21 logits (bfloat16):",
        "",
        "| way | µs |",
        "|---|---:|",
        *(f"| {r['way']} | {r['us']:.1f} |" for r in results),
    ]
    save(args, "\n".join(lines), {"hardware": hardware, "results": results})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
