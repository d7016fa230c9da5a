"""Replaying a backend's step as a CUDA graph: one graph launch per step, whatever the backend's
own launch path costs (Numba's dispatcher, or the dozens of small kernels of the torch reference)."""

from __future__ import annotations

import torch


class GraphedStep:
    def __init__(self, backend, buffers, actions_like: torch.Tensor):
        """``buffers``: the env's ClassicBuffers or MultiAgentBuffers (anything with ``tensors()``)."""
        # The graph's input (zeros are valid actions): the backend's own actions buffer where it
        # keeps one, so that a replay copies the actions only once.
        self._actions = getattr(backend, "actions_buffer", None)
        if self._actions is None:
            self._actions = torch.zeros_like(actions_like)
        # A first, uncaptured launch compiles and loads the kernels; the env's buffers are restored
        # afterwards so that construction leaves no trace.
        live = buffers.tensors()
        saved = {name: tensor.clone() for name, tensor in live.items()}
        side = torch.cuda.Stream(device=actions_like.device)
        side.wait_stream(torch.cuda.current_stream(actions_like.device))
        with torch.cuda.stream(side):
            backend.step(self._actions)
        torch.cuda.current_stream(actions_like.device).wait_stream(side)
        for name, tensor in saved.items():
            live[name].copy_(tensor)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            backend.step(self._actions)

    def step(self, actions: torch.Tensor) -> None:
        if actions is not self._actions:
            self._actions.copy_(actions)
        self._graph.replay()
