"""CovidEconomy's scripted policies (masks, the real-world series, the schedules, any batch) and
``gpu-marl-covid-report`` end to end at short episodes, with a trained checkpoint, and its errors.
About 20 s on a CPU (half of it matplotlib drawing the report's figures)."""

import csv
import dataclasses
import json

import numpy as np
import pytest
import torch
from gpu_marl_envs.baselines.checkpoint import save_checkpoint, training_state
from gpu_marl_envs.baselines.multi_agent import MultiAgentConfig, make_policies
from gymnasium.vector import AutoresetMode
from PIL import Image

import gpu_marl_envs
from gpu_marl_envs import covid_policies as cp
from gpu_marl_envs import covid_report
from gpu_marl_envs.envs import covid_economy as ce

ENV_ID = "gpu_marl_envs/CovidEconomy-v0"
# 120 days: two subsidy decisions (t = 0, 90), several cooldowns, the real world's early changes.
P = ce.CovidEconomyParams(episode_length=120)
# From 2021-04-01 the data ends on day 60 of 100: the last values must hold.
LATE = ce.CovidEconomyParams(start_date="2021-04-01", episode_length=100)


def play(policy, p, num_envs=1):
    """One episode: per step ``(state before, actions, state after)`` and the mask before the step."""
    env = gpu_marl_envs.make_parallel(ENV_ID, num_envs, params=p, autoreset_mode=AutoresetMode.DISABLED)
    observations, infos = env.reset_groups(seed=0)
    steps = []
    for _ in range(p.episode_length):
        before, masks = env.get_state(), {g: info["action_mask"].clone() for g, info in infos.items()}
        actions = policy(observations)
        observations, _, _, _, infos = env.step_groups(actions)
        steps.append((before, masks, actions, env.get_state()))
    return steps


def level(p, state):
    """Each state's current stringency level, (E, S)."""
    envs = torch.arange(len(state["t"]))
    return state["stringency"][envs, state["t"].long() % p.calibration.beta_delay].long()


@pytest.mark.parametrize(
    "make",
    [lambda p: cp.real_world(p, within_masks=True), cp.all_open, cp.all_closed, lambda p: cp.closed_then_open(p, 40)],
)
@pytest.mark.parametrize("p", [P, LATE], ids=["2020", "2021"])
def test_scripted_policies_act_within_the_masks(make, p):
    acted = 0
    for t, (_, masks, actions, _) in enumerate(play(make(p), p)):
        for group, action in actions.items():
            allowed = masks[group].gather(-1, action[..., None])[..., 0]
            assert allowed.all(), f"day {t + 1}: {group} {torch.nonzero(~allowed).tolist()} acted outside the mask"
            acted += int((action != 0).sum())
    assert acted > 0


def data_levels(p, days):
    c = p.calibration
    return torch.as_tensor(c.policy_levels(np.minimum(p.start_index + np.asarray(days), c.num_days - 1)))


@pytest.mark.parametrize("p", [P, LATE], ids=["2020", "2021"])
def test_real_world_reproduces_the_data(p):
    # As the original's baseline: the data's level on every day (changes inside cooldowns included).
    steps = play(cp.real_world(p), p)
    outside = 0
    for t, (_, masks, actions, after) in enumerate(steps):
        assert torch.equal(level(p, after)[0], data_levels(p, t + 1)), f"day {t + 1}"
        outside += int((~masks["governors"].gather(-1, actions["governors"][..., None])).sum())
    assert outside > 0  # the data changes levels inside cooldowns
    # Within the masks: the data's level on each day a governor could act.
    free_days = 0
    for t, (_, masks, _, after) in enumerate(play(cp.real_world(p, within_masks=True), p)):
        free = masks["governors"][0, :, 1]
        assert torch.equal(level(p, after)[0][free], data_levels(p, t + 1)[free]), f"day {t + 1}"
        free_days += int(free.sum())
    assert free_days > p.episode_length  # many days checked (each change locks its governor for 28)


def test_real_world_subsidies_keep_each_intervals_spending():
    p = ce.CovidEconomyParams()  # 540 days: every payment of the data, and days past its end
    c = p.calibration
    daily = cp.real_world_subsidy_levels(p, p.start_index + p.episode_length + 1)
    levels = c.subsidy_levels(p.max_annual_subsidy_per_person, p.num_subsidy_levels, p.subsidy_interval)
    assert np.array_equal(daily[: c.num_days], levels)  # the calibration's on the data's days
    assert daily[-1] == 0 and daily[c.num_days - 1] > 0  # the last payment runs out after the data
    policy = cp.real_world(p)
    m = p.subsidy_interval
    for start in range(0, p.episode_length, m):  # decision days t = start, paying days start + 1 .. start + m
        data = daily[p.start_index + start + 1 : p.start_index + start + 1 + m]
        assert int(policy.subsidy[start + 1]) == round(data.mean()), start
    assert [int(policy.subsidy[t + 1]) for t in range(0, 540, 90)] == [2, 1, 0, 2, 5, 0]


def test_schedules():
    p = P
    cooldown = p.action_cooldown
    for policy, days_closed, expected_subsidy in (
        (cp.all_open(p), 0, 0),
        (cp.all_closed(p), p.episode_length, 20),
        (cp.closed_then_open(p, 40), 40, 0),
        (cp.closed_then_open(p, 10), cooldown, 0),
    ):
        for t, (_, _, _, after) in enumerate(play(policy, p)):
            want = p.num_stringency_levels if t + 1 <= days_closed else 1
            assert (level(p, after) == want).all(), f"{policy.name}: day {t + 1}"
            assert int(after["subsidy_level"][0]) == expected_subsidy, f"{policy.name}: day {t + 1}"


def test_policies_act_on_any_batch_and_device():
    # Envs on different days and levels: each env's actions are those it gets alone.
    p = P
    states = [step[0] for step in play(cp.real_world(p), p)[::37]]
    batch = ce.CovidEconomyState(**{name: torch.cat([s[name] for s in states]) for name in states[0]})
    observations = ce.observe(p, batch)
    t, levels = cp.observed_day_and_levels(p, observations["governors"])
    assert torch.equal(t, batch.t.long()) and torch.equal(levels, level(p, vars(batch)))
    for policy in cp.scripted_policies(p, closed_days=40):
        together = policy(observations)
        for e in range(len(states)):
            alone = policy({g: o[e : e + 1] for g, o in observations.items()})
            for group in together:
                assert torch.equal(together[group][e : e + 1], alone[group]), (policy.name, e, group)
    with pytest.raises(ValueError, match=r"policy.to\('meta'\)"):
        cp.all_open(p)({g: o.to("meta") for g, o in observations.items()})


def test_bad_schedules():
    with pytest.raises(ValueError, match="closed_days"):
        cp.closed_then_open(P, 0)
    with pytest.raises(ValueError, match="stringency targets"):
        cp.SchedulePolicy("x", P, torch.zeros((1, P.num_states), dtype=torch.int64), torch.zeros(1, dtype=torch.int64))
    with pytest.raises(ValueError, match="subsidy targets"):
        cp.SchedulePolicy("x", P, torch.ones((1, P.num_states), dtype=torch.int64), torch.full((1,), 21))
    with pytest.raises(ValueError, match="shape"):
        cp.SchedulePolicy("x", P, torch.ones((1, 3), dtype=torch.int64), torch.zeros(1, dtype=torch.int64))


# -- the report --------------------------------------------------------------------------------------


def covid_checkpoint(path, episode_length):
    """A checkpoint as gpu-marl-train writes it (header + training state), of fresh small policies."""
    config = MultiAgentConfig.from_dict(
        {
            "hyperparameters": {"num_envs": 2, "num_steps": 4, "total_timesteps": 8},
            "groups": {"governors": "governors", "planner": "planner"},
            "policies": {"governors": {"hidden": [8]}, "planner": {"hidden": [8]}},
            "env_params": {"episode_length": episode_length},
        },
        algorithm="ppo",
    )
    torch.manual_seed(0)
    policies = make_policies(ENV_ID, config)
    save_checkpoint(
        {
            "algorithm": "ppo",
            "env": "CovidEconomy-v0",
            "config": config.to_dict(),
            **training_state(1, [], 1, **{f"policy/{name}": policy for name, policy in policies.items()}),
        },
        path,
    )
    return path


def test_report_end_to_end(tmp_path, capsys):
    checkpoint = covid_checkpoint(tmp_path / "checkpoint.pt", episode_length=7)
    out = tmp_path / "report"
    assert (
        covid_report.main(["--checkpoint", str(checkpoint), "--out", str(out), "--num-envs", "2", "--closed-days", "3"])
        == 0
    )
    names = [
        "real world",
        "real world, within masks",
        "all open",
        "all closed, full subsidy",
        "closed 3 days, then open",
        covid_report.TRAINED,
    ]
    report = json.loads((out / "covid_report.json").read_text())
    assert [row["policy"] for row in report["policies"]] == names
    assert report["settings"]["params"]["episode_length"] == 7  # the checkpoint's env params
    assert report["settings"]["num_envs"] == 2 and report["settings"]["backend"] == "torch"
    with open(out / "covid_report.csv") as file:
        rows = list(csv.DictReader(file))
    assert [row["policy"] for row in rows] == names and list(rows[0]) == list(covid_report.COLUMNS)
    markdown = (out / "covid_report.md").read_text()
    assert all(f"| {name} |" in markdown for name in names)
    assert "| closed 3 days, then open |" in capsys.readouterr().out
    for key in [*covid_report.QUANTITIES, "overview"]:
        with Image.open(out / f"covid_{key}.png") as image:
            assert image.format == "PNG" and image.width >= 700, key
    by_name = {row["policy"]: row for row in report["policies"]}
    assert by_name[covid_report.TRAINED]["actions_outside_masks"] == 0  # greedy within the masks
    assert by_name["all closed, full subsidy"]["subsidies"] > 0 == by_name["all open"]["subsidies"]


def test_report_rows_are_the_envs_episode_totals():
    p = dataclasses.replace(P, episode_length=10)
    policy = cp.all_closed(p)
    episode = covid_report.run_episode(policy.name, covid_report.scripted(policy), p, num_envs=3)
    env = gpu_marl_envs.make_parallel(ENV_ID, 1, params=p, autoreset_mode=AutoresetMode.DISABLED)
    observations, _ = env.reset_groups()
    welfare = governors = 0.0
    for _ in range(p.episode_length):
        observations, rewards, _, _, infos = env.step_groups(policy(observations))
        welfare += rewards["planner"].double().sum().item()
        governors += rewards["governors"].double().mean().item()
    assert episode.summary["social_welfare"] == pytest.approx(welfare, rel=1e-5)
    assert episode.summary["governors_mean_return"] == pytest.approx(governors, rel=1e-5)
    for metric, key in (
        ("deaths", "deaths"),
        ("unemployment", "mean_unemployed"),
        ("subsidies", "subsidies"),
        ("productivity", "productivity"),
    ):
        assert episode.summary[key] == pytest.approx(infos["planner"]["episode"][metric].item(), rel=1e-6), metric
    # The last day's series values are the state's.
    state = env.get_state()
    assert episode.series["infections"][-1] == pytest.approx(state["infected"].double().sum().item(), rel=1e-6)
    assert episode.series["stringency"][-1] == pytest.approx(10.0)
    assert episode.series["subsidy"][-1] == 20.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--num-envs", "0"], "--num-envs: expected an integer >= 1, got 0"),
        (["--episode-length", "x"], "--episode-length: expected an integer >= 1, got 'x'"),
        (["--closed-days", "-2"], "--closed-days: expected an integer >= 1, got -2"),
        (["--device", "tpu"], "device"),
        (["--device", "cuda:99"], "cuda"),
        (["--backend", "jax"], "invalid choice: 'jax'"),
    ],
)
def test_bad_arguments(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        covid_report.main(args + ["--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written


def test_bad_checkpoints_and_out(tmp_path, capsys):
    tag = tmp_path / "tag.pt"
    save_checkpoint({"algorithm": "ppo", "env": "TagContinuous-v0", "config": {}}, tag)
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    (tmp_path / "file").write_text("")
    cases = [
        (["--checkpoint", str(tmp_path / "missing.pt")], "no checkpoint at"),
        (
            ["--checkpoint", str(tag)],
            "not a gpu-marl-train checkpoint of CovidEconomy-v0 (its env: 'TagContinuous-v0')",
        ),
        (["--checkpoint", str(tmp_path / "junk.pt")], "cannot be read as a checkpoint"),
        (["--out", str(tmp_path / "file"), "--episode-length", "2"], "exists and is not a folder"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            covid_report.main(["--out", str(tmp_path / "out"), *args] if "--out" not in args else args)
        assert exit_info.value.code == 2, args
        assert message in capsys.readouterr().err, args


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["torch", "numba", "pycuda"])
def test_episodes_on_the_gpu_match_the_cpu(backend, cuda_device):
    # The policies act on the device, on a batch, with each backend's env: the summaries are the
    # CPU reference's (one env) up to the kernels' few-ulp transcendental differences.
    p = ce.CovidEconomyParams()
    for policy in cp.scripted_policies(p):
        cpu = covid_report.run_episode(policy.name, covid_report.scripted(policy), p)
        gpu = covid_report.run_episode(
            policy.name,
            covid_report.scripted(policy.to(cuda_device)),
            p,
            num_envs=1000,
            device=cuda_device,
            backend=backend,
        )
        for key, value in cpu.summary.items():
            assert gpu.summary[key] == pytest.approx(value, rel=1e-4), (policy.name, key)
        for key, values in cpu.series.items():
            np.testing.assert_allclose(
                gpu.series[key], values, rtol=1e-4, atol=1e-6 * np.abs(values).max(), err_msg=f"{policy.name}: {key}"
            )
