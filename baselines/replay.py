"""A uniform experience replay (Lin, 1992; Mnih et al., 2015) of single-agent transitions kept on
the env's device, for DDPG and TD3: :class:`joint_replay.JointReplay`'s ring (device-side position
and fill, capturable writes and draws) under the fields of :class:`Transitions`, with their shapes
checked on the way in. Only ``len()`` and ``state_dict()`` read the fill on the host (a
synchronisation each).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from gpu_marl_envs.baselines.joint_replay import JointReplay


class Transitions(NamedTuple):
    """A batch of transitions, each field ``(B, ...)``."""

    obs: torch.Tensor  # (B, obs_size) float32
    actions: torch.Tensor  # (B, action_size) float32
    rewards: torch.Tensor  # (B,) float32
    next_obs: torch.Tensor  # (B, obs_size) float32: the successor of obs, the final observation where an episode ended
    terminated: torch.Tensor  # (B,) bool: the episode ended in a terminal state (no bootstrapping); not truncation


class ReplayBuffer:
    """A ring of ``capacity`` transitions on ``device``; once full, each write replaces the oldest."""

    FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")

    def __init__(self, capacity: int, obs_size: int, action_size: int, device="cpu"):
        for name, value in (("capacity", capacity), ("obs_size", obs_size), ("action_size", action_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ReplayBuffer {name} must be an int >= 1, got {value!r}")
        self.capacity, self.obs_size, self.action_size = capacity, obs_size, action_size
        self.device = torch.device(device)
        observation, action = ((obs_size,), torch.float32), ((action_size,), torch.float32)
        self.ring = JointReplay(
            capacity,
            {
                "obs": observation,
                "actions": action,
                "rewards": ((), torch.float32),
                "next_obs": observation,
                "terminated": ((), torch.bool),
            },
            self.device,
        )
        # Whether anything was ever added, known on the host: a sample from an empty buffer is refused
        # without reading the device's count (a ring, once written, never empties).
        self._written = False

    obs = property(lambda self: self.ring.fields["obs"])
    actions = property(lambda self: self.ring.fields["actions"])
    rewards = property(lambda self: self.ring.fields["rewards"])
    next_obs = property(lambda self: self.ring.fields["next_obs"])
    terminated = property(lambda self: self.ring.fields["terminated"])
    position = property(lambda self: self.ring.position, doc="the slot the next item goes to (a device tensor)")
    size = property(lambda self: self.ring.size, doc="the items stored, at most capacity (a device tensor)")

    def __len__(self) -> int:
        """The number of stored items (read from the device: a synchronisation)."""
        return int(self.size)

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
    ) -> None:
        """Store a batch of ``B`` transitions (``B <= capacity``); the values are copied."""
        batch = obs.shape[0] if obs.dim() > 0 else -1
        expected = {
            "obs": (batch, self.obs_size),
            "actions": (batch, self.action_size),
            "rewards": (batch,),
            "next_obs": (batch, self.obs_size),
            "terminated": (batch,),
        }
        given = {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": next_obs, "terminated": terminated}
        for name, tensor in given.items():
            if tuple(tensor.shape) != expected[name]:
                raise ValueError(
                    f"ReplayBuffer.add: {name} has shape {tuple(tensor.shape)}, expected "
                    f"{expected[name]} (a batch of B transitions, B taken from obs)"
                )
        if batch > self.capacity:
            raise ValueError(f"ReplayBuffer.add: a batch of {batch} transitions exceeds the capacity {self.capacity}")
        slots = self.ring.slots(batch)
        for name, tensor in given.items():
            self.ring.write(name, slots, tensor)  # cast to the field's dtype, as an indexed assignment would
        self.ring.advance(batch)
        self._written = True

    def state_dict(self) -> dict:
        """The stored items (not the empty slots) and the write position, for checkpoints."""
        # Copies, so that a saved file holds only the stored items, not the whole preallocated ring.
        size = len(self)
        return {"position": int(self.position), **{name: getattr(self, name)[:size].clone() for name in self.FIELDS}}

    def load_state_dict(self, state: dict) -> None:
        size = state["obs"].shape[0]
        if (
            size > self.capacity
            or state["obs"].shape[1:] != self.obs.shape[1:]
            or state["actions"].shape[1:] != self.actions.shape[1:]
        ):
            raise ValueError(
                f"cannot load a replay state of {size} items of obs {tuple(state['obs'].shape[1:])} and "
                f"actions {tuple(state['actions'].shape[1:])} into a buffer of {self.capacity} items of "
                f"obs {tuple(self.obs.shape[1:])} and actions {tuple(self.actions.shape[1:])}"
            )
        for name in self.FIELDS:
            getattr(self, name)[:size] = state[name]
        # In place: a captured insert or draw reads these tensors.
        self.size.fill_(size)
        self.position.fill_(int(state["position"]))
        self._written = size > 0

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Transitions:
        """``batch_size`` stored transitions drawn uniformly with replacement (copies)."""
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"ReplayBuffer.sample: batch_size must be an int >= 1, got {batch_size!r}")
        if not self._written:
            raise ValueError("ReplayBuffer.sample: the buffer is empty; add transitions first")
        idx = self.ring.sample(batch_size, generator)
        return Transitions(
            self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.terminated[idx]
        )
