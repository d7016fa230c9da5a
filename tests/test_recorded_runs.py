"""The trainers reproduce tiny runs recorded before their set-up and iterations moved out of
``train`` (so that the Lightning modules run the same code): the sum and the absolute sum of
every network's parameters and buffers at the end, recorded on the CPU with torch 2.13.0 from the
code before the move (bitwise equal to it after the move on the recording machine).

DDPG's record was taken again (and TD3's added) when the replay's draw moved to the device
(``randint`` of 62 bits modulo the device's fill, one draw for an iteration's gradient steps, so
that CUDA graphs can capture it; issue 43): that draw is the only change, since the new code with
the old per-step ``randint(size)`` draws put back reproduces the old record bitwise.

The tolerance covers rounding only: another CPU's kernels may round matrix products differently,
by far less than a changed trainer (another order of random draws, a missing step) moves them.
"""

import pytest
from gpu_marl_envs.baselines import a2c, ddpg, multi_agent, ppo

CASES = {
    "ppo": (
        ppo,
        "CartPole-v1",
        lambda: ppo.PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 5, num_minibatches=2, update_epochs=2),
        (1.3123546811402775, 1235.5252333514763),
    ),
    "a2c": (
        a2c,
        "Acrobot-v1",
        lambda: a2c.A2CConfig(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 6, anneal_lr=True),
        (-20.024830235139234, 1276.5497703658475),
    ),
    "ddpg": (
        ddpg,
        "Pendulum-v1",
        lambda: ddpg.DDPGConfig(
            num_envs=4, total_timesteps=4 * 10, learning_starts=8, batch_size=8, buffer_size=64, hidden=(16, 16)
        ),
        (9.782737660745624, 88.3610067149275),
    ),
    "td3": (
        ddpg,
        "Pendulum-v1",
        lambda: ddpg.TD3Config(
            num_envs=4, total_timesteps=4 * 10, learning_starts=8, batch_size=8, buffer_size=64, hidden=(16, 16)
        ),
        (9.915125088271452, 88.41774056988652),
    ),
    "tag": (
        multi_agent,
        "TagGridworld-v0",
        lambda: multi_agent.MultiAgentConfig.from_dict(
            {
                "hyperparameters": {"num_envs": 2, "num_steps": 8, "total_timesteps": 2 * 8 * 5},
                "groups": {"taggers": "taggers", "runners": "runners"},
                "policies": {
                    "taggers": {
                        "algorithm": "ppo",
                        "hidden": [16],
                        "num_minibatches": 2,
                        "update_epochs": 2,
                        "normalize_observations": True,
                        "ent_coef": [[0, 0.5], [40, 0.05]],
                    },
                    "runners": {"algorithm": "a2c", "hidden": [16]},
                },
                "env_params": {"grid_length": 4, "episode_length": 8},
            }
        ),
        (338.5867004170673, 669.5594557034224),
    ),
}


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("case", CASES)
def test_a_trainer_reproduces_its_recorded_run(case):
    module, env_id, config, (recorded_sum, recorded_abs_sum) = CASES[case]
    trained, _ = module.train(env_id, config(), device="cpu", log_every=2, log=None)
    tensors = [
        t.double()
        for network in (trained.values() if isinstance(trained, dict) else [trained])
        for t in network.state_dict().values()
        if t.is_floating_point()
    ]
    assert sum(float(t.sum()) for t in tensors) == pytest.approx(recorded_sum, rel=1e-4, abs=1e-3)
    assert sum(float(t.abs().sum()) for t in tensors) == pytest.approx(recorded_abs_sum, rel=1e-5)
