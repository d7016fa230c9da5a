"""MountainCarContinuous-v0 Numba kernels; the torch reference is
gpu_marl_envs/envs/mountain_car_continuous.py. Reset, physics and observation are MountainCar-v0's
(``mountain_car_numba.py``)."""

import numpy as np
from gpu_marl_envs.kernels.mountain_car_numba import advance, observe, reset  # noqa: F401  (this env's too)
from gpu_marl_envs.kernels.numba_api import cuda

_ZERO = np.float32(0.0)


@cuda.jit(device=True)
def step(state, n, i, actions, p):
    action = actions[i, 0]  # actions arrive as rows of shape (1,)
    if action != action:  # NaN reads as 0 (the torch backend does so before its step)
        action = _ZERO
    # Gymnasium: force = min(max(action[0], min_action), max_action).
    force = min(max(action, p.min_action), p.max_action)
    terminated = advance(state, n, i, force * p.power, p)
    # Gymnasium: reward = 100 if terminated else 0, then reward -= pow(action[0], 2) * 0.1, with
    # the unclipped action.
    base = p.goal_reward if terminated else _ZERO
    return base - action * action * p.action_cost, terminated
