"""The trainers' settings are typed and bounded (baselines/settings.py): ``--set`` values are read by
the type of the field they set (a Python-spelled ``False`` is false, never a truthy string),
every config refuses values out of its fields' ranges with a message that names the field, and a
config written to ``config.toml`` reads back as the same config."""

import math

import pytest
from gpu_marl_envs.baselines import a2c, ddpg, multi_agent, ppo, run_config, settings

CARTPOLE = run_config.read_config(env="CartPole-v1")


def cartpole(*overrides: str):
    return run_config.build_config(CARTPOLE, list(overrides), None)[2]


@pytest.mark.parametrize(
    "text, value", [("false", False), ("False", False), ("FALSE", False), ("true", True), ("True", True)]
)
def test_booleans_read_as_booleans_whatever_their_capitals(text, value):
    assert cartpole(f"anneal_lr={text}").anneal_lr is value
    assert cartpole(f"norm_adv={text}").norm_adv is value


@pytest.mark.parametrize(
    "override, message",
    [
        ("anneal_lr=0", "PPOConfig.anneal_lr must be true or false, got 0"),
        ("anneal_lr=yes", "PPOConfig.anneal_lr must be true or false, got 'yes'"),
        ("gamma=2", "PPOConfig.gamma must be a number in [0, 1], got 2"),
        ("gae_lambda=-0.5", "PPOConfig.gae_lambda must be a number in [0, 1]"),
        ("gamma=nan", "PPOConfig.gamma must be a number in [0, 1], got nan"),
        ("hidden=[0]", "PPOConfig.hidden must be a non-empty tuple of layer widths >= 1"),
        ("hidden=[]", "PPOConfig.hidden must be a non-empty tuple of layer widths >= 1"),
        (
            "hidden=64",
            "PPOConfig.hidden must be a non-empty tuple of layer widths >= 1 (TOML: a list, e.g. [64, 64]), got 64",
        ),
        ("hidden=[64.5]", "PPOConfig.hidden must be"),
        ("seed=1.5", "PPOConfig.seed must be an int in [0, 2**32 - 1], got 1.5"),
        ("seed=-1", "PPOConfig.seed must be an int in [0, 2**32 - 1], got -1"),
        ("learning_rate=inf", "PPOConfig.learning_rate must be a number in (0, 1], got inf"),
        ("learning_rate=0", "PPOConfig.learning_rate must be a number in (0, 1], got 0"),
        ("learning_rate=1e308", "PPOConfig.learning_rate must be a number in (0, 1], got 1e+308"),
        ("clip_coef=1e300", "PPOConfig.clip_coef must be a number in (0, 1], got 1e+300"),
        ("learning_rate=fast", "PPOConfig.learning_rate must be a number in (0, 1], got 'fast'"),
        ("num_envs=0", "PPOConfig.num_envs must be an int >= 1, got 0"),
        ("num_steps=true", "PPOConfig.num_steps must be an int >= 1, got True"),
        ("max_grad_norm=0", "PPOConfig.max_grad_norm must be a number > 0 (inf: no clipping), got 0"),
        ("fused_mlp=yes", "PPOConfig.fused_mlp must be true, false or \"auto\", got 'yes'"),
    ],
)
def test_bad_settings_name_the_field_and_its_range(override, message):
    with pytest.raises(run_config.ConfigError) as error:
        cartpole(override)
    assert message in str(error.value)


def test_every_config_checks_its_fields():
    assert cartpole("max_grad_norm=inf", "fused_mlp=auto").max_grad_norm == math.inf
    for make, message in [
        (lambda: a2c.A2CConfig(rms_prop_eps=0.0), "A2CConfig.rms_prop_eps must be a finite number > 0"),
        (lambda: ddpg.DDPGConfig(seed=-3), "DDPGConfig.seed must be an int in [0, 2**32 - 1]"),
        (lambda: ddpg.DDPGConfig(exploration="uniform"), 'DDPGConfig.exploration must be "gaussian" or "ou"'),
        (
            lambda: multi_agent.PolicyConfig(learning_rate=math.inf),
            "PolicyConfig.learning_rate must be a number in (0, 1]",
        ),
        (lambda: multi_agent.PolicyConfig(train="no"), "PolicyConfig.train must be true or false"),
        (lambda: multi_agent.MultiAgentConfig(seed=1.5), "MultiAgentConfig.seed must be an int"),
        (lambda: ppo.PPOConfig(hidden=[64, 64]), "PPOConfig.hidden must be a non-empty tuple"),
    ]:
        with pytest.raises(ValueError) as error:
            make()
        assert message in str(error.value)


def test_multi_agent_overrides_are_typed_by_their_table():
    raw = run_config.read_config(env="TagGridworld-v0")
    _, _, config = run_config.build_config(
        raw,
        [
            "policies.shared.anneal_lr=False",
            "env_params.grid_length=6",
            "groups.runners=shared",
            "policies.shared.hidden=[8]",
        ],
        None,
    )
    shared = config.policies["shared"]
    assert shared.anneal_lr is False and shared.hidden == (8,) and config.env_params["grid_length"] == 6
    with pytest.raises(run_config.ConfigError, match=r"\[policies.shared\]: PolicyConfig.gamma must be a number"):
        run_config.build_config(raw, ["policies.shared.gamma=1.5"], None)


def test_written_configs_read_back_as_the_same_config(tmp_path):
    config = cartpole("anneal_lr=False", "hidden=[32]", "learning_rate=1e-3", "fused_mlp=false")
    path = tmp_path / "config.toml"
    path.write_text(run_config.to_toml("ppo", "CartPole-v1", config))
    assert run_config.build_config(run_config.read_config(path), [], None)[2] == config


def test_read_follows_the_fields_type():
    assert settings.read("False", bool) is False and settings.read("False") == "False"
    assert settings.read("[64, 64]", tuple[int, ...]) == [64, 64]
    assert settings.read("ou", str) == "ou" and settings.read("1e-3", float) == 1e-3
    assert settings.as_annotated([[0, 0.5], [10, 0.1]], float | tuple[tuple[int, float], ...]) == ((0, 0.5), (10, 0.1))
