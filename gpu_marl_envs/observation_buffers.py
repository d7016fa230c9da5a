"""Observation buffers used in turn (``observation_buffers=k`` of the envs).

An env overwrites its observation buffer at every step, so a caller that keeps a step's
observations while it takes the next step (skrl's trainers hand them to ``record_transition``
after it) has to copy them, a read and a write of the whole observation batch per step. With
``k`` buffers the steps write into them in turn, and the observations a step returns stay as they
are through the next ``k - 1`` steps; nothing is copied.

Every step kernel writes every row of its observation buffer (in each autoreset mode), so a buffer
needs nothing from the step that wrote it before. Resets and ``set_state`` write into the current
buffer: a partial reset keeps the rows of the sub-envs it leaves alone. Only the observations
alternate; every other buffer (state, rewards, flags, final observations) is shared, so each
``Side`` is the env's buffers with their own observations, and its own backend and launcher, whose
kernel arguments (or captured CUDA graph) point at that buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import torch


class Side(NamedTuple):
    buffers: Any  # ClassicBuffers or MultiAgentBuffers, with this side's observations
    backend: Any
    launcher: Any  # the backend, or a GraphedStep of it


def check_observation_buffers(count) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"observation_buffers must be an int >= 1, got {count!r}")
    return count


class Sides:
    """The sides of an env (``count`` of ``buffers``, the first with ``buffers`` itself;
    ``build(buffers)`` makes a side's backend and launcher) and which one holds the current
    observations."""

    def __init__(self, buffers, count: int, build: Callable[[Any], tuple[Any, Any]]):
        copies = [buffers] + [
            dataclasses.replace(buffers, observations=torch.zeros_like(buffers.observations)) for _ in range(count - 1)
        ]
        self.all = tuple(Side(copy, *build(copy)) for copy in copies)
        self.index = 0

    @property
    def current(self) -> Side:
        return self.all[self.index]

    def advance(self) -> Side:
        """The next side in turn, made the current one: the side a step writes."""
        self.index = (self.index + 1) % len(self.all)
        return self.all[self.index]
