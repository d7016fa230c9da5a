"""Checkpoints of the trainers: a run interrupted after a save and resumed from it ends where an
uninterrupted run's schedule ends, with its networks, optimizer state and history carried over; a
fresh run saves its starting state first; a state written by another number of ranks resumes
after the same env steps, or is refused where those make no whole number of iterations."""

import pytest
import torch
from gpu_marl_envs.baselines import a2c, ddpg, ppo
from gpu_marl_envs.baselines.checkpoint import load_optimizer, restore, resumed_iteration, training_state
from gpu_marl_envs.baselines.replay import ReplayBuffer

CASES = {
    "ppo": (
        ppo,
        ppo.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_minibatches=2, update_epochs=2),
        "CartPole-v1",
    ),
    "a2c": (a2c, a2c.A2CConfig(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 6, anneal_lr=True), "Acrobot-v1"),
    "ddpg": (
        ddpg,
        ddpg.DDPGConfig(
            num_envs=4, total_timesteps=4 * 6, learning_starts=8, batch_size=8, buffer_size=64, hidden=(16, 16)
        ),
        "Pendulum-v1",
    ),
    "td3": (
        ddpg,
        ddpg.TD3Config(
            num_envs=4, total_timesteps=4 * 6, learning_starts=8, batch_size=8, buffer_size=64, hidden=(16, 16)
        ),
        "Pendulum-v1",
    ),
}


class Interrupted(Exception):
    pass


def interrupted_run(module, config, env_id, stop_after: int):
    """The states saved by a run that crashes after saving its ``stop_after``-th iteration."""
    saved = []

    def save(state):
        saved.append(state)
        if state["iteration"] == stop_after:
            raise Interrupted

    with pytest.raises(Interrupted):
        module.train(env_id, config, device="cpu", log_every=1, log=None, save=save)
    return saved


@pytest.mark.parametrize("name", CASES)
def test_resume_continues_the_run(name):
    module, config, env_id = CASES[name]
    states = interrupted_run(module, config, env_id, stop_after=3)
    # The run's starting point first (what a restart before the first log interval continues), then each log entry.
    assert [s["iteration"] for s in states] == [0, 1, 2, 3] and states[0]["history"] == []
    saved = states[-1]
    steps_per_iteration = config.num_envs * getattr(config, "num_steps", 1)
    assert saved["world_size"] == 1 and len(saved["history"]) == 3

    states = []
    _, history = module.train(env_id, config, device="cpu", log_every=1, log=None, resume=saved, save=states.append)
    # The history goes on from the checkpoint's, to the end of the run's schedule.
    assert history[:3] == saved["history"]
    assert [h["env_steps"] for h in history] == [steps_per_iteration * (i + 1) for i in range(6)]
    assert [s["iteration"] for s in states] == [4, 5, 6]


@pytest.mark.parametrize("name", CASES)
def test_resume_restores_networks_and_optimizers(name):
    module, config, env_id = CASES[name]
    saved = interrupted_run(module, config, env_id, stop_after=6)[-1]  # the run's last iteration
    resumed = []
    policy, history = module.train(
        env_id, config, device="cpu", log_every=1, log=None, resume=saved, save=resumed.append
    )
    assert resumed == [] and history == saved["history"], "a finished run resumes to nothing more"
    for key, value in saved["model"].items():
        assert torch.equal(policy.state_dict()[key], value), f"parameter {key} differs after resume"


def test_td3_checkpoints_hold_the_critic_pair_and_restore_it():
    module, config, env_id = CASES["td3"]
    saved = interrupted_run(module, config, env_id, stop_after=6)[-1]
    for part in ("critic", "target_critic"):
        assert {key.split(".")[0] for key in saved[part]} == {"q1", "q2"}, part
    run = ddpg.start(env_id, config, device="cpu", resume=saved)
    restore(saved, **run.parts)
    for part in ("critic", "target_critic"):
        for key, value in getattr(run, part).state_dict().items():
            assert torch.equal(value, saved[part][key]), f"{part}.{key} differs after resume"
    # One optimizer for the pair (as CleanRL's and Stable-Baselines3's TD3), its state restored too.
    assert len(run.critic_optimizer.state) == len(list(run.critic.parameters())) == 12
    assert len(run.replay) == 24
    run.envs.close()


def test_resume_rejects_a_foreign_state():
    module, config, env_id = CASES["ppo"]
    with pytest.raises(ValueError, match="no training state"):
        module.train(env_id, config, device="cpu", log=None, resume={"model": {}})
    with pytest.raises(ValueError, match=r"no training state \(no \['world_size'\]\)"):
        module.train(env_id, config, device="cpu", log=None, resume={"iteration": 1, "history": [], "model": {}})
    with pytest.raises(ValueError, match=r"lacks \['optimizer'\]"):
        module.train(
            env_id, config, device="cpu", log=None, resume={"iteration": 1, "world_size": 1, "history": [], "model": {}}
        )


def test_a_state_of_other_ranks_resumes_after_the_same_env_steps():
    """4 iterations of 2 ranks are 8 of one rank and 2 of four; 3 iterations of 2 ranks are no
    whole number of 4-rank iterations (a resume there would count steps twice or skip some)."""
    assert resumed_iteration({"iteration": 4, "world_size": 2}, world_size=1, steps_per_iteration=64) == 8
    assert resumed_iteration({"iteration": 4, "world_size": 2}, world_size=4, steps_per_iteration=64) == 2
    assert resumed_iteration(None, world_size=4, steps_per_iteration=64) == 0
    with pytest.raises(ValueError, match="cannot resume on 4 ranks: .* 3 iterations of 2 ranks"):
        resumed_iteration({"iteration": 3, "world_size": 2}, world_size=4, steps_per_iteration=64)


def test_optimizer_state_round_trips_with_its_learning_rate_tensor():
    """A captured update reads its learning rate from a tensor, which loading must keep (and set)."""
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=torch.tensor(0.1))
    rate = optimizer.param_groups[0]["lr"]
    net(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    state = training_state(1, [], 1, optimizer=optimizer)["optimizer"]
    state["param_groups"][0]["lr"] = 0.05
    load_optimizer(optimizer, state)
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(0.05)
    assert optimizer.state[net.weight]["step"].item() == 1


def test_replay_state_round_trip():
    replay = ReplayBuffer(4, 2, 1)
    for value in range(6):  # wraps round: holds 2, 3, 4, 5 with the next write at slot 2
        replay.add(
            torch.full((1, 2), float(value)),
            torch.zeros(1, 1),
            torch.tensor([value * 1.0]),
            torch.zeros(1, 2),
            torch.tensor([False]),
        )
    copy = ReplayBuffer(4, 2, 1)
    copy.load_state_dict(replay.state_dict())
    assert (len(copy), int(copy.position)) == (len(replay), int(replay.position)) == (4, 2)
    assert torch.equal(copy.rewards, replay.rewards)
    with pytest.raises(ValueError, match="cannot load a replay state"):
        ReplayBuffer(4, 3, 1).load_state_dict(replay.state_dict())
