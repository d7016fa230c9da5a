"""A rollout's fields reordered for an epoch of shuffled minibatches, by one gather.

PPO draws each minibatch as rows of the flattened rollout picked by a random permutation. Indexing
each field by the minibatch's rows (``obs[idx]``, ``actions[idx]``, ...) is one gather per field per
minibatch, and torch sends a gather whose rows are a multiple of 16 bytes (CartPole's four float32
observations) to its vectorised kernel, which gives each row a thread block of its own: on an H200,
80 µs for a quarter of PPO CartPole's 4096 x 128 rollout, where the same rows 36 bytes wide, every
field side by side, took 6.8 µs (``benchmarks/experiments/ppo_minibatch_gather.py``;
``docs/benchmarks/training.md``). :class:`Reorderable` keeps the fields side by side as float32
columns, an odd number of them so that a row is never a multiple of 16 bytes, and reorders all rows
at once per epoch: one gather, then one copy per field back to its own dtype, contiguous; each
minibatch is then a slice, no kernel at all.

The values are exact copies: float32 holds every float16, bfloat16 and float32 value, and every
integer below 2**24 (the fields hold action indices, far below it), so a minibatch is bitwise the
rows that indexing each field would give, in the same order, and the update's arithmetic is
unchanged.
"""

from __future__ import annotations

import torch


class Reorderable:
    """``fields`` (tensors with the same number of rows first) packed once, side by side, as float32
    columns; :meth:`reordered` returns each field's rows in a given order."""

    def __init__(self, *fields: torch.Tensor):
        rows = fields[0].shape[0]
        if any(field.shape[0] != rows for field in fields):
            raise ValueError(f"fields of {[field.shape[0] for field in fields]} rows: each needs {rows}")
        self._layouts = [(field.shape[1:], field.dtype) for field in fields]
        columns = [field.reshape(rows, -1).float() for field in fields]
        self._widths = [column.shape[1] for column in columns]
        if sum(self._widths) % 4 == 0:
            # A row of a multiple of 16 bytes would take torch's vectorised gather (the docstring).
            columns.append(columns[0].new_zeros(rows, 1))
        self._packed = torch.cat(columns, dim=1)

    def reordered(self, order: torch.Tensor) -> list[torch.Tensor]:
        """Each field's rows ``order`` (a 1-D index tensor), contiguous, in its own shape and dtype."""
        rows = self._packed[order]
        fields, first = [], 0
        for (shape, dtype), width in zip(self._layouts, self._widths):
            column = rows[:, first : first + width]
            fields.append(column.to(dtype).contiguous().view(len(order), *shape))
            first += width
        return fields
