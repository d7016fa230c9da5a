"""Peer baseline: gymnax's CartPole-v1 rolled out the way gymnax is meant to be used, the whole
rollout (random actions, step, auto-reset) fused by ``jax.jit`` + ``jax.lax.scan`` over ``vmap``.

Run in the same session as benchmarks/throughput.py so both are measured on one GPU:

    python benchmarks/peers/gymnax_cartpole.py --num-envs 4096 65536 1048576
"""

import argparse
import statistics
import time

import gymnax
import jax
import jax.numpy as jnp


def make_rollout(num_envs: int, steps: int):
    env, params = gymnax.make("CartPole-v1")
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset = jax.vmap(env.reset, in_axes=(0, None))

    @jax.jit
    def rollout(key):
        key, reset_key = jax.random.split(key)
        _, state = reset(jax.random.split(reset_key, num_envs), params)

        def body(carry, _):
            state, key, total = carry
            key, action_key, step_key = jax.random.split(key, 3)
            actions = jax.random.randint(action_key, (num_envs,), 0, 2)
            # gymnax 1.x: (obs, state, reward, terminated, truncated, info), auto-reset inside.
            _, state, reward, _, _, _ = step(jax.random.split(step_key, num_envs), state, actions, params)
            return (state, key, total + reward.sum()), None

        (_, _, total), _ = jax.lax.scan(body, (state, key, jnp.float32(0)), None, length=steps)
        return total

    return rollout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-envs", nargs="+", type=int, default=[4096, 65536, 1048576])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"# gymnax, jax {jax.__version__} on {jax.devices()[0].device_kind}")
    for n in args.num_envs:
        rollout = make_rollout(n, args.steps)
        rollout(jax.random.PRNGKey(0)).block_until_ready()  # compile
        times = []
        for r in range(args.repeats):
            start = time.perf_counter()
            rollout(jax.random.PRNGKey(r + 1)).block_until_ready()
            times.append(time.perf_counter() - start)
        rate = n * args.steps / statistics.median(times)
        print(
            f"gymnax CartPole-v1 {n:>9,} envs: {rate / 1e9:.3f} G env-steps/s (fused rollout of {args.steps} steps)",
            flush=True,
        )


if __name__ == "__main__":
    main()
