"""A uniform experience replay of named fields kept on the device, whose writes and draws a CUDA
graph can capture: the off-policy trainers' store, of joint transitions for :mod:`maddpg` and under
:class:`replay.ReplayBuffer`'s fields for :mod:`ddpg`.

The write position and the number of stored items are device tensors, so that an insert and a draw
captured once stay right at every replay: the slots a write fills and the range a draw covers move
with the tensors, not with numbers frozen at capture. Each write is an ``index_copy_`` into
preallocated storage; nothing synchronises with the host except :meth:`JointReplay.state_dict` (a
checkpoint).
"""

from __future__ import annotations

import torch

FieldSpec = tuple[tuple[int, ...], torch.dtype]
"""A field's shape per item and its dtype."""


class JointReplay:
    """A ring of ``capacity`` items, each a value of every field of ``fields`` (name -> (shape per
    item, dtype)), on ``device``; once full, each write replaces the oldest items.

    A step of ``count`` items is written field by field into :meth:`slots`, then :meth:`advance`
    moves the ring on; :meth:`sample` draws stored items uniformly with replacement."""

    def __init__(self, capacity: int, fields: dict[str, FieldSpec], device):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"JointReplay capacity must be an int >= 1, got {capacity!r}")
        self.capacity, self.device = capacity, torch.device(device)
        self.fields = {
            name: torch.zeros((capacity, *shape), dtype=dtype, device=self.device)
            for name, (shape, dtype) in fields.items()
        }
        self.position = torch.zeros((), dtype=torch.int64, device=self.device)  # the slot the next item goes to
        self.size = torch.zeros((), dtype=torch.int64, device=self.device)  # items stored, at most capacity

    def slots(self, count: int) -> torch.Tensor:
        """The ``count`` slots (int64, on the device) the next items go to: ``position``,
        ``position + 1``, ... wrapping round; distinct while ``count <= capacity``."""
        if count > self.capacity:
            raise ValueError(f"JointReplay: a step of {count} items exceeds the capacity {self.capacity}")
        return (self.position + torch.arange(count, device=self.device)) % self.capacity

    def write(self, name: str, slots: torch.Tensor, values: torch.Tensor) -> None:
        """Copy ``values`` (``(len(slots), *shape)``) into field ``name`` at ``slots``."""
        self.fields[name].index_copy_(0, slots, values.to(self.fields[name].dtype))

    def advance(self, count: int) -> None:
        """Count ``count`` items as written (after every field of them is)."""
        self.position.add_(count).remainder_(self.capacity)
        self.size.add_(count).clamp_(max=self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Indices of ``batch_size`` stored items drawn uniformly with replacement (at least one
        item must be stored), from ``generator`` (on the device) if given. Drawn on the device from
        62 random bits modulo the fill, whose bias (under ``size / 2**62``) no batch can show;
        ``torch.randint`` of the fill would take its range from the host."""
        bits = torch.randint(2**62, (batch_size,), dtype=torch.int64, device=self.device, generator=generator)
        return bits % self.size.clamp(min=1)

    def take(self, name: str, index: torch.Tensor) -> torch.Tensor:
        """Field ``name`` at the items ``index`` (a copy)."""
        return self.fields[name][index]

    def state_dict(self) -> dict:
        """The stored items (not the empty slots), the write position and the fill, for checkpoints."""
        size = int(self.size)
        return {
            "position": int(self.position),
            "size": size,
            **{name: field[:size].clone() for name, field in self.fields.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        size = int(state["size"])
        missing = sorted(set(self.fields) - set(state))
        if missing:
            raise ValueError(f"the replay state lacks the fields {missing}")
        for name, field in self.fields.items():
            saved = state[name]
            if size > self.capacity or tuple(saved.shape) != (size, *field.shape[1:]):
                raise ValueError(
                    f"cannot load {name} of shape {tuple(saved.shape)} into a replay of {self.capacity} "
                    f"items of shape {tuple(field.shape[1:])}"
                )
        for name, field in self.fields.items():
            field[:size] = state[name]
        self.size.fill_(size)
        self.position.fill_(int(state["position"]))
