"""``observation_buffers=k``: the steps write their observations into k buffers in turn. An env
with two buffers must give exactly the outputs of one with one buffer, step after step, partial
resets and ``set_state`` included, while the observations a step returned stay unchanged through
the next step."""

import pytest
import torch
from conftest import GPU_BACKENDS, KERNEL_BACKENDS_HERE
from gymnasium.vector import AutoresetMode

from gpu_marl_envs import GpuParallelEnv, GpuVectorEnv
from gpu_marl_envs.envs.tag_continuous import TagContinuousParams

MODES = [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP]
SMALL_TAG = TagContinuousParams(
    num_taggers=2, num_runners=3, num_other_agents_observed=4, grid_length=2.0, episode_length=6
)


def vector_pair(backend, device, mode, num_envs=6, **kwargs):
    return [
        GpuVectorEnv(
            "CartPole-v1",
            num_envs,
            device=device,
            backend=backend,
            autoreset_mode=mode,
            max_episode_steps=7,
            observation_buffers=k,
            **kwargs,
        )
        for k in (1, 2)
    ]


def check_vector(envs, steps: int, device) -> None:
    """Step both envs alike; reset a few sub-envs and set one's state half-way."""
    one, two = envs
    for env in envs:
        env.reset(seed=3)
    generator = torch.Generator().manual_seed(0)
    kept = kept_values = None
    for t in range(steps):
        actions = torch.randint(2, (one.num_envs,), generator=generator).to(device)
        outputs = [env.step(actions) for env in envs]
        for a, b in zip(outputs[0][:4], outputs[1][:4]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        if one.autoreset_mode == AutoresetMode.SAME_STEP:
            ended = outputs[0][4]["_final_obs"]
            torch.testing.assert_close(
                outputs[0][4]["final_obs"][ended], outputs[1][4]["final_obs"][ended], rtol=0, atol=0
            )
        if kept is not None:  # the previous step's observations outlived this step
            torch.testing.assert_close(kept, kept_values, rtol=0, atol=0)
            assert outputs[1][0].data_ptr() != kept.data_ptr()
        kept, kept_values = outputs[1][0], outputs[1][0].clone()
        if t == steps // 2:
            mask = torch.zeros(one.num_envs, dtype=torch.bool, device=device)
            mask[1::3] = True
            observations = [env.reset(options={"reset_mask": mask})[0] for env in envs]
            torch.testing.assert_close(observations[0], observations[1], rtol=0, atol=0)
            state = {name: torch.full((1,), 0.01) for name in one.state_fields}
            observations = [env.set_state(state, env_ids=[0]) for env in envs]
            torch.testing.assert_close(observations[0], observations[1], rtol=0, atol=0)
            kept = None  # a reset writes into the current buffer


def parallel_pair(backend, device, mode, num_envs=4, **kwargs):
    return [
        GpuParallelEnv(
            "TagContinuous-v0",
            num_envs,
            device=device,
            backend=backend,
            autoreset_mode=mode,
            params=SMALL_TAG,
            observation_buffers=k,
            **kwargs,
        )
        for k in (1, 2)
    ]


def check_parallel(envs, steps: int, device) -> None:
    one, two = envs
    for env in envs:
        env.reset_groups(seed=5)
    generator = torch.Generator().manual_seed(1)
    kept = kept_values = None
    for t in range(steps):
        actions = {
            group: torch.stack(
                [
                    torch.randint(int(n), (one.num_envs, len(agents)), generator=generator)
                    for n in one.action_space(agents[0]).nvec
                ],
                dim=-1,
            ).to(device)
            for group, agents in one.groups.items()
        }
        if t % 2:  # the per-agent API advances the buffers too
            per_agent = {
                agent: actions[group][:, k] for group, agents in one.groups.items() for k, agent in enumerate(agents)
            }
            outputs = [env.step(per_agent) for env in envs]
            observations = [out[0][one.possible_agents[0]] for out in outputs]
        else:
            outputs = [env.step_groups(actions) for env in envs]
            observations = [out[0]["taggers"] for out in outputs]
        for a, b in zip(outputs[0][:4], outputs[1][:4]):
            for key in a:
                torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
        if kept is not None:
            torch.testing.assert_close(kept, kept_values, rtol=0, atol=0)
        kept, kept_values = observations[1], observations[1].clone()
        if t == steps // 2:
            mask = torch.zeros(one.num_envs, dtype=torch.bool, device=device)
            mask[0] = True
            resets = [env.reset_groups(options={"reset_mask": mask})[0] for env in envs]
            for key in resets[0]:
                torch.testing.assert_close(resets[0][key], resets[1][key], rtol=0, atol=0)
            kept = None


# kind -> (make the pair, check it, steps on the torch backend)
KINDS = {"vector": (vector_pair, check_vector, 20), "games": (parallel_pair, check_parallel, 14)}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES)
def test_two_buffers_give_one_buffers_outputs_torch(kind, mode):
    pair, check, steps = KINDS[kind]
    check(pair("torch", "cpu", mode), steps=steps, device=torch.device("cpu"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", KERNEL_BACKENDS_HERE)
def test_two_buffers_give_one_buffers_outputs_kernels(kind, backend):
    pair, check, _ = KINDS[kind]
    check(pair(backend, "cpu", AutoresetMode.SAME_STEP, num_envs=2), steps=8, device=torch.device("cpu"))


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_observation_buffers_must_be_a_positive_int(count):
    with pytest.raises(ValueError, match="observation_buffers must be an int >= 1"):
        GpuVectorEnv("CartPole-v1", 2, device="cpu", observation_buffers=count)
    with pytest.raises(ValueError, match="observation_buffers must be an int >= 1"):
        GpuParallelEnv("TagContinuous-v0", 2, device="cpu", params=SMALL_TAG, observation_buffers=count)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_two_buffers_on_the_gpu(cuda_device, backend, cuda_graph):
    check_vector(
        vector_pair(backend, cuda_device, AutoresetMode.SAME_STEP, num_envs=1000, cuda_graph=cuda_graph),
        steps=30,
        device=cuda_device,
    )
    check_parallel(
        parallel_pair(backend, cuda_device, AutoresetMode.SAME_STEP, num_envs=64, cuda_graph=cuda_graph),
        steps=14,
        device=cuda_device,
    )
