"""The env and game definitions this package ships: one module each (params, spaces, the torch
reference), registered with their kernels by :mod:`gpu_marl_envs.envs.bundled`."""
