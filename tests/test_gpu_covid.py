"""CovidEconomy on a GPU (``pytest -m gpu``): every kernel backend against the torch reference at 60,
10,000 and 100,000 envs, from identical states.

Both envs start from one ``set_state``: env ``e`` on day ``(T - 1 - 5 e) mod T`` with its governors'
cooldowns around that day (locked, due now, free) and its own subsidy level, so that within the
steps run some envs decide subsidies (days 91, 181, ...), receive their first vaccines (day 296),
end their episode and autoreset. Then both step with the same random actions, independently: the
state never reads back what the transcendental softplus feeds (unemployment and production are
recomputed each day), so nothing drifts. Compared every step: integers, flags, masks, the epidemic
compartments, rings and filter sums exactly; what the softplus feeds (unemployment, production,
rewards, observations, returns, totals) to ``harness.TWIN_RTOL`` / ``TWIN_ATOL`` (CUDA's
expf/log1pf against torch's).
"""

import pytest
import torch
from conftest import GPU_BACKENDS
from gymnasium.vector import AutoresetMode
from harness import TWIN_ATOL, TWIN_RTOL, assert_close

from gpu_marl_envs.parallel_env import GpuParallelEnv

pytestmark = pytest.mark.gpu

ENV_ID = "CovidEconomy-v0"
NUM_STEPS = 12
KERNEL_BACKENDS = [b for b in GPU_BACKENDS if b != "torch"]
# State fields computed without the softplus: the same float32 operations in the same order.
EXACT_FIELDS = (
    "susceptible",
    "infected",
    "recovered",
    "vaccinated",
    "deaths",
    "stringency",
    "stringency_changes",
    "filter_sums",
    "cooldown",
    "subsidy_level",
    "total_deaths",
    "total_subsidy",
    "t",
)


def spread_days(env: GpuParallelEnv) -> dict[str, torch.Tensor]:
    state = env.get_state()
    num_envs, num_states = state["cooldown"].shape
    episode_length = env.params.episode_length
    envs = torch.arange(num_envs, device=env.device)
    t = (episode_length - 1 - 5 * envs) % episode_length
    governors = torch.arange(num_states, device=env.device)
    state["t"] = t.to(torch.int32)
    state["cooldown"] = (t[:, None] + governors % 5 - 2).clamp(min=0).to(torch.int32)
    state["subsidy_level"] = (envs % (env.params.num_subsidy_levels + 1)).to(torch.int32)
    return state


def compare(name, expected, actual, context, exact=False):
    """As harness.assert_close, the check on the device (100,000 envs' observations are 1.7 GB); the
    message from the first env that differs."""
    assert expected.shape == actual.shape, f"{context}: {name} shapes {tuple(expected.shape)} vs {tuple(actual.shape)}"
    tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": TWIN_RTOL, "atol": TWIN_ATOL}
    if expected.is_floating_point():
        bad = ~torch.isclose(actual, expected, **tolerance)
    else:
        bad = expected != actual
    if bad.any():
        env = int(bad.reshape(len(bad), -1).any(1).nonzero()[0])
        assert_close(f"{name} (from env {env})", expected[env : env + 1], actual[env : env + 1], context, **tolerance)


def run_twins(num_envs, backend, mode):
    device = torch.device("cuda")
    envs = [
        GpuParallelEnv(ENV_ID, num_envs, device=device, backend=b, autoreset_mode=mode, validate_actions=False)
        for b in ("torch", backend)
    ]
    for env in envs:
        env.reset(seed=0)
    state = spread_days(envs[0])
    starts = [env.set_state(state) for env in envs]
    compare("set_state observations", starts[0]["planner_0"], starts[1]["planner_0"], f"{backend} set_state")
    generator = torch.Generator(device=device).manual_seed(0)
    ended = 0
    for step in range(NUM_STEPS):
        actions = {
            group: torch.randint(
                0, int(envs[0].action_space(agents[0]).n), (num_envs, len(agents)), generator=generator, device=device
            )
            for group, agents in envs[0].groups.items()
        }
        outputs = [env.step_groups(actions) for env in envs]
        context = f"E={num_envs} {backend} {mode.name} step {step}"
        for name, expected, actual in zip(
            ("observations", "rewards", "terminations", "truncations"), outputs[0][:4], outputs[1][:4]
        ):
            for group in expected:
                compare(f"{name}[{group}]", expected[group], actual[group], context)
        for group, info in outputs[0][4].items():
            twin = outputs[1][4][group]
            compare(f"action_mask[{group}]", info["action_mask"], twin["action_mask"], context)
            compare("_episode", info["_episode"], twin["_episode"], context)
            ended_here = info["_episode"]
            for key, expected in info["episode"].items():
                compare(f"episode[{key}]", expected[ended_here], twin["episode"][key][ended_here], context)
            if "final_obs" in info:
                mask = info["_final_obs"]
                compare(f"final_obs[{group}]", info["final_obs"][mask], twin["final_obs"][mask], context)
        for name, value in envs[0].get_state().items():
            compare(f"state.{name}", value, envs[1].get_state()[name], context, exact=name in EXACT_FIELDS)
        episode_over = outputs[0][4]["planner"]["_episode"]
        ended += int(episode_over.sum())
        if mode == AutoresetMode.DISABLED and episode_over.any():
            mask = episode_over.clone()
            resets = [env.reset(options={"reset_mask": mask})[0] for env in envs]
            compare("reset observations", resets[0]["governor_0"], resets[1]["governor_0"], context)
    assert ended > 0, f"{context}: no episode ended; autoreset went untested"


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("num_envs", [60, 10_000, 100_000])
def test_kernels_match_reference(num_envs, backend, cuda_device):
    run_twins(num_envs, backend, AutoresetMode.NEXT_STEP)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.DISABLED], ids=lambda m: m.name)
def test_autoreset_modes_on_gpu(mode, backend, cuda_device):
    run_twins(10_000, backend, mode)
