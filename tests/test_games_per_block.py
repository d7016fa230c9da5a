"""Several envs per block (``MultiAgentDefinition.games_per_block``): the MPE games pack their teams,
on CUDA C and on Numba, and a game that cannot run packed is refused in one line before nvcc sees
it. (The packed kernels' steps are checked against the torch reference on the GPU:
tests/test_gpu_mpe.py; Numba's simulator runs a block per env.)"""

import dataclasses
import importlib
import shutil
from pathlib import Path

import pytest
import torch

from gpu_marl_envs.backends import multi_agent_numba
from gpu_marl_envs.backends.multi_agent_pycuda import check_games_per_block, kernel_source
from gpu_marl_envs.checker import compile_cuda
from gpu_marl_envs.envs import mpe_physics
from gpu_marl_envs.multi_agent_buffers import can_store_by_warp, stores_by_warp
from gpu_marl_envs.registration import GAMES

MPE = ["gpu_marl_envs/SimpleSpread-v3", "gpu_marl_envs/SimpleTag-v3", "gpu_marl_envs/SimpleSpeakerListener-v4"]
COVER = Path(__file__).resolve().parent.parent / "docs" / "examples" / "cover" / "cover" / "cover.cu"


@pytest.mark.parametrize("game_id", MPE)
def test_mpe_games_pack_teams_of_a_warp_slice_into_128_threads(game_id):
    spec = GAMES[game_id]
    params = spec.definition.params_type()
    lanes, games = spec.definition.block_threads(params), spec.definition.games_per_block(params)
    assert lanes * games == mpe_physics.PACKED_BLOCK_THREADS and lanes <= 32
    # A team has a lane per agent, but SimpleSpread's small games and speaker-listener's, written for one lane.
    assert lanes == 1 if "SimpleTag" not in game_id else lanes >= params.num_agents
    source = kernel_source(spec, params)
    assert f"#define GME_GAMES_PER_BLOCK {games}\n" in source and f"#define GME_GAME_THREADS {lanes}\n" in source


@pytest.mark.parametrize("game_id", MPE)
def test_numba_packs_the_games_written_for_it_where_it_has_warp_barriers(game_id, monkeypatch):
    spec = GAMES[game_id]
    params = spec.definition.params_type()
    module = importlib.import_module(spec.kernels.numba)
    packed = (spec.definition.block_threads(params), spec.definition.games_per_block(params))
    # The simulator: a block per env, of half as many threads as agents (each thread two agents or more).
    assert multi_agent_numba._packing(spec, module, params) == ((params.num_agents + 1) // 2, 1)
    monkeypatch.setattr(multi_agent_numba, "simulator_enabled", lambda: False)  # as on a GPU
    assert multi_agent_numba._packing(spec, module, params) == packed
    monkeypatch.delattr(module, "PACKS_GAMES")  # a Numba module written for a block per env: a warp each
    assert multi_agent_numba._packing(spec, module, params) == (32, 1)


def test_a_large_mpe_game_keeps_a_block_per_game():
    spec = GAMES["gpu_marl_envs/SimpleSpread-v3"]
    params = spec.definition.params_type(N=1000)
    assert spec.definition.games_per_block(params) == 1 and spec.definition.block_threads(params) == 256


def _packed(definition, lanes: int, games: int):
    return dataclasses.replace(definition, block_threads=lambda p: lanes, games_per_block=lambda p: games)


def test_a_game_written_for_a_block_per_env_is_refused_packed():
    definition = GAMES["gpu_marl_envs/SimpleSpread-v3"].definition
    params = definition.params_type()
    # Cover's kernels use threadIdx.x, blockDim.x and __syncthreads(), which span a packed block's envs.
    with pytest.raises(ValueError, match=r"cover.cu uses threadIdx.*gme_lane\(\), gme_lanes\(\) and gme_sync\(\)"):
        check_games_per_block(_packed(definition, 4, 32), params, COVER)


@pytest.mark.parametrize("lanes", [3, 64])
def test_packed_teams_must_be_power_of_two_slices_of_a_warp(lanes):
    spec = GAMES["gpu_marl_envs/SimpleSpread-v3"]
    params = spec.definition.params_type()
    with pytest.raises(ValueError, match=f"power of two up to 32.*got block_threads {lanes}"):
        check_games_per_block(_packed(spec.definition, lanes, 2), params, spec.kernels.cuda)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("lanes, games", [(32, 4), (8, 2)])
def test_other_packings_compile(lanes, games):
    spec = GAMES["gpu_marl_envs/SimpleTag-v3"]
    packed = dataclasses.replace(spec, definition=_packed(spec.definition, lanes, games))
    assert compile_cuda(packed, spec.definition.params_type()) is not None


@pytest.mark.parametrize(
    "game_id, settings, expected",
    [
        ("gpu_marl_envs/SimpleSpread-v3", {}, True),  # a lane holds a game's 3 agents
        ("gpu_marl_envs/SimpleSpread-v3", {"N": 4}, False),  # 128 games' rows exceed the staging's room
        ("gpu_marl_envs/SimpleTag-v3", {}, False),  # a lane an agent: a team stores a row's elements together
        ("gpu_marl_envs/SimpleSpeakerListener-v4", {}, True),  # a lane holds the game's 2 agents
    ],
)
def test_a_staged_game_stores_by_warp_only_where_a_lane_holds_several_agents(game_id, settings, expected):
    spec = GAMES[game_id]
    definition = spec.definition
    params = definition.make_params(**settings)
    games, lanes = definition.games_per_block(params), definition.block_threads(params)
    assert can_store_by_warp(definition, params, games, lanes) == expected
    # The simulator stages nothing, whatever the grid.
    assert not stores_by_warp(definition, params, games, lanes, 2**20, torch.device("cpu"))
    if expected:
        assert "#define GME_WARP_STORES 1\n" in kernel_source(spec, params, warp_stores=True)
    else:
        with pytest.raises(ValueError, match="cannot store by warp"):
            kernel_source(spec, params, warp_stores=True)
