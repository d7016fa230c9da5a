"""How :class:`models.ActorCritic` runs its PyTorch layers on CUDA (the MLPs that :mod:`fused_mlp`
does not take, such as Tag's [256, 256] policies): ``network(x)``, with four changes that leave
the numbers the same up to rounding.

- **Aligned sizes** (:func:`linear`): input features, and outputs where there are more than one, are
  zero-padded to multiples of :data:`ALIGN`. An odd size such as Tag's 71 observations or 42 logits
  sends cuBLAS to its unaligned kernels: on an H200 at 5.5 M rows (a Tag A2C update) in bfloat16, a
  71 -> 256 layer's forward and backward took 9.2 ms unpadded and 6.3 ms padded, 256 -> 42 5.6 and
  4.7 ms; over a whole Tag A2C iteration (1,000 games x 50 steps) 85.4 ms became 76.9 ms. A value
  head's single output is left alone (cuBLAS runs it as a matrix-vector product; padded to 8 it
  took 6% longer).
- **Tanh layers' backward in one kernel** (:class:`_LinearActivation`): ``dz = dy * (1 - y^2)``
  and the bias gradient (the column sums of ``dz``) from one read of ``dy`` and ``y``
  (:func:`policy_kernels.activation_backward_and_bias`), where PyTorch reads ``dz`` again for the
  sums. These passes are bound by memory traffic in wide layers over many rows; on an H200 at 5.5 M
  rows of width 256 in bfloat16 the kernel took 2.1 ms against PyTorch's 3.1 ms.
- **A critic's last tanh layer and its single output** (:class:`_TanhValueHead`): one kernel
  goes from the value's gradient to the layer's, skipping the head's input gradient.
- **ReLU layers as one product** (:func:`relu_linear`, :class:`_LinearActivation`): cuBLASLt adds
  the bias and applies the ReLU in the product's epilogue, so the activation is written once and
  never read back by a ReLU kernel (cuBLASLt's epilogues have no tanh); the backward as the tanh
  layers'.

The fused backwards are used where a gradient is taken over at least :data:`KERNEL_MIN_ROWS`
rows, with Triton installed, outside ``torch.compile`` (which fuses on its own).

The CPU, and passes over fewer than :data:`KERNEL_MIN_ROWS` rows, run ``network(x)`` unchanged.
"""

from __future__ import annotations

import contextlib

import torch
from gpu_marl_envs.baselines import fused_mlp
from torch import nn
from torch.nn import functional as F

ALIGN = 8
"""Feature counts a CUDA matrix product gets as multiples of this (16 bytes of bfloat16, 32 of
float32): cuBLAS picks its fast tensor-core kernels only for rows of a multiple of 16 bytes."""
ACTIVATIONS = {nn.Tanh: "tanh", nn.ReLU: "relu"}
"""The activations a layer runs with (:func:`linear`), by module type."""
ACTIVATION_FUNCTIONS = {"tanh": torch.tanh, "relu": torch.relu}
"""The activations as functions, by name."""
KERNEL_MIN_ROWS = 4096
"""Passes over fewer rows run as PyTorch's layers, unpadded (here and in :mod:`sampling`): they are
bound by launches rather than by memory traffic, so padding only adds launches, and a small run
would pay for Triton's import and compiles in a fresh process (PureJaxRL's CartPole config, 4
envs and 128-row minibatches, has a 3 s target from a fresh process to a return of 475)."""
ACTIVATION_BLOCK_BYTES = 65_536
"""Bytes of each tensor that one program (8 warps) of the activations' backwards takes: on an H200
at 5.5 M rows of width 256 (tanh), 128 rows in bfloat16 (2.05 ms, against PyTorch's 3.11) and 64
in float32 (3.96 ms, against 5.67) were the fastest of the sizes tried; a block twice as large
spills its registers (27 ms in float32)."""
ALIGNED_ROWS_BLOCK = 64
"""Rows a program of :func:`aligned_input`'s kernel copies."""


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the products run in: autocast's where it is on, else ``x``'s."""
    return torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else x.dtype


def row_count(x: torch.Tensor) -> int:
    """The rows of ``x``: its elements over its last dimension (0 for a scalar or empty rows)."""
    return x.numel() // x.shape[-1] if x.dim() > 0 and x.shape[-1] > 0 else 0


def applies(x: torch.Tensor) -> bool:
    """Whether a pass over ``x`` (rows of features) takes this module's path: on CUDA, with at
    least :data:`KERNEL_MIN_ROWS` rows."""
    return x.is_cuda and row_count(x) >= KERNEL_MIN_ROWS


def activation_of(module: nn.Module | None) -> str | None:
    """``"tanh"`` or ``"relu"`` for the activation modules this module fuses with a layer, else None."""
    return ACTIVATIONS.get(type(module))


def run_mlp(network: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``network(x)``; where :func:`applies`, each ``Linear`` (with the ``Tanh`` or ``ReLU`` after
    it, if any) runs as :func:`linear`."""
    if not applies(x):
        return network(x)
    modules = list(network)
    i = 0
    while i < len(modules):
        module = modules[i]
        if isinstance(module, nn.Linear):
            activation = activation_of(modules[i + 1]) if i + 1 < len(modules) else None
            if activation == "tanh" and i + 3 == len(modules) and value_head_applies(module, modules[i + 2], x):
                return tanh_value_head(module, modules[i + 2], x)
            x = linear(module, x, activation)
            i += 2 if activation else 1
        else:
            x = module(x)
            i += 1
    return x


def aligned_input(x: torch.Tensor, features: int) -> torch.Tensor:
    """``x`` (``(..., features)``) as :func:`linear` takes it: with its features zero-padded to a
    multiple of :data:`ALIGN`, in the autocast dtype (autocast would cast the padded input again
    otherwise); ``x`` itself where nothing is padded. One copy, which an actor and a critic reading
    the same observations can share."""
    pad = -features % ALIGN
    if not pad:
        return x
    padded = x.new_empty((*x.shape[:-1], features + pad), dtype=compute_dtype(x))
    rows = row_count(x)
    if kernels_apply(rows) and not needs_grad(x) and x.stride(-1) == 1 and x.dim() in (2, 3):
        # One pass over rows of a stride or two (a group's agents in an env's buffer), vectorised
        # over them: the copy below writes rows of a stride other than its source's element by
        # element (on an H200, 25 us a Tag rollout step's 100,000 rows).
        from gpu_marl_envs.baselines import policy_kernels

        if x.dim() == 2:
            outer_stride, inner, inner_stride = 0, rows, x.stride(0)
        else:
            outer_stride, inner, inner_stride = x.stride(0), x.shape[1], x.stride(1)
        blocks = (rows + ALIGNED_ROWS_BLOCK - 1) // ALIGNED_ROWS_BLOCK
        if blocks:
            policy_kernels.aligned_rows[(blocks,)](
                x,
                padded,
                rows,
                max(inner, 1),
                outer_stride,
                inner_stride,
                N_IN=features,
                N_OUT=features + pad,
                COLUMNS=1 << (features + pad - 1).bit_length(),
                BLOCK=ALIGNED_ROWS_BLOCK,
            )
        return padded
    padded[..., :features] = x
    padded[..., features:] = 0  # only the padding columns are written twice
    return padded


def linear(layer: nn.Linear, x: torch.Tensor, activation: str | None = None) -> torch.Tensor:
    """``layer(x)``, then the ``activation`` (``"tanh"``, ``"relu"`` or None) if asked, with aligned
    sizes (module docstring); ``x`` may come padded already (:func:`aligned_input`)."""
    return affine(layer.weight, layer.bias, x, activation)


def affine(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    x: torch.Tensor,
    activation: str | None = None,
    padded: bool = False,
):
    """:func:`linear` of the layer of ``weight`` (``(outputs, inputs)``) and ``bias``; ``padded``:
    the outputs with the zero columns that align them (what the product wrote), not a view
    without them."""
    outputs, inputs = weight.shape
    pad_out = -outputs % ALIGN if outputs > 1 else 0
    dtype = compute_dtype(x)
    if x.shape[-1] == inputs:
        x = aligned_input(x, inputs)
    grad = needs_grad(x, weight, bias)
    if not grad:
        weight, bias = frozen_parameters(weight, bias, pad_out, dtype)
    else:
        weight, bias = aligned_parameters(weight, bias, pad_out)
    width = outputs + pad_out
    if activation and grad and fused_backward_applies(width, weight, bias, row_count(x)):
        y = _LinearActivation.apply(x.to(dtype), weight.to(dtype), bias.to(dtype), activation)
    elif activation == "relu" and bias is not None and not grad:
        y = relu_linear(x.to(dtype), weight, bias)
    else:
        y = F.linear(x, weight, bias)
        y = ACTIVATION_FUNCTIONS[activation](y) if activation else y
    return y[..., :outputs] if pad_out and not padded else y


def aligned_parameters(weight: torch.Tensor, bias: torch.Tensor | None, pad_out: int):
    """``weight`` and ``bias`` zero-padded to :data:`ALIGN` inputs and ``pad_out`` more outputs."""
    pad_in = -weight.shape[1] % ALIGN
    weight = F.pad(weight, (0, pad_in, 0, pad_out)) if pad_in or pad_out else weight
    bias = F.pad(bias, (0, pad_out)) if pad_out and bias is not None else bias
    return weight, bias


_frozen: dict | None = None
"""Inside :func:`frozen_weights`: the parameters' padded, cast copies by ``(id(weight), pad_out,
dtype)``, each beside the weight and bias it was made from."""


@contextlib.contextmanager
def frozen_weights():
    """Within, passes without gradients pad and cast each layer's parameters once and reuse them
    (:func:`frozen_parameters`): for a rollout, whose policies' parameters do not change until its
    update. Step by step, every layer's weight and bias would be padded and cast again at each
    step: on Tag A2C's rollout (two policies of three layers, 50 steps) some 900 small kernels."""
    global _frozen
    outer = _frozen
    _frozen = {} if outer is None else outer
    try:
        yield
    finally:
        _frozen = outer


def frozen_parameters(weight: torch.Tensor, bias: torch.Tensor | None, pad_out: int, dtype: torch.dtype):
    """:func:`aligned_parameters` in ``dtype``, for a pass without gradients: made once per
    :func:`frozen_weights` context for a leaf tensor (a parameter), else each time."""
    if _frozen is None or not weight.is_leaf:
        weight, bias = aligned_parameters(weight, bias, pad_out)
        return weight.to(dtype), None if bias is None else bias.to(dtype)
    key = (id(weight), pad_out, dtype)
    made = _frozen.get(key)
    if made is None or made[0] is not weight or made[1] is not bias:
        padded, padded_bias = aligned_parameters(weight, bias, pad_out)
        made = _frozen[key] = (weight, bias, padded.to(dtype), None if bias is None else padded_bias.to(dtype))
    return made[2], made[3]


def needs_grad(*tensors: torch.Tensor) -> bool:
    """Whether autograd records a pass over ``tensors``."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def relu_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``relu(x @ weight.T + bias)`` (all in one dtype) as one cuBLASLt product whose epilogue adds
    the bias and applies the ReLU (``torch._addmm_activation``), where a ``Linear`` and a ``ReLU``
    write the product and read it back: the same values, since rounding keeps signs and zero. Not
    differentiable (:class:`_LinearActivation` is)."""
    rows = x.reshape(-1, x.shape[-1])
    return torch._addmm_activation(bias, rows, weight.t()).view(*x.shape[:-1], weight.shape[0])


def kernels_apply(rows: int) -> bool:
    """Whether a pass over ``rows`` rows takes this module's and :mod:`sampling`'s Triton kernels:
    at least :data:`KERNEL_MIN_ROWS`, Triton installed, ``torch.compile`` not tracing."""
    return rows >= KERNEL_MIN_ROWS and fused_mlp.available() and not torch.compiler.is_compiling()


def fused_backward_applies(width: int, weight: torch.Tensor, bias: torch.Tensor | None, rows: int) -> bool:
    """Whether a tanh or ReLU layer of ``width`` outputs over ``rows`` rows takes
    :class:`_LinearActivation`: a gradient will be taken, the width is a power of two the kernel
    holds in a block (16 to 1,024), and :func:`kernels_apply`."""
    return (
        bias is not None
        and needs_grad(weight, bias)
        and 16 <= width <= 1024
        and width & (width - 1) == 0
        and kernels_apply(rows)
    )


def value_head_applies(layer: nn.Linear, head: nn.Module, x: torch.Tensor) -> bool:
    """Whether a network's last ``layer, Tanh, head`` run as :func:`tanh_value_head`: ``head`` is a
    ``Linear`` with a single output and a bias, ``layer`` takes its input unpadded, and the fused
    backward applies (:func:`fused_backward_applies`)."""
    return (
        isinstance(head, nn.Linear)
        and head.out_features == 1
        and head.bias is not None
        and x.shape[-1] == layer.in_features
        and layer.in_features % ALIGN == 0
        and fused_backward_applies(layer.out_features, layer.weight, layer.bias, row_count(x))
    )


def tanh_value_head(layer: nn.Linear, head: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``head(tanh(layer(x)))`` for :func:`value_head_applies` layers, in the autocast dtype where
    autocast is on, with :class:`_TanhValueHead`'s backward."""
    dtype = compute_dtype(x)
    return _TanhValueHead.apply(*(t.to(dtype) for t in (x, layer.weight, layer.bias, head.weight, head.bias)))


def rows_per_block(y: torch.Tensor) -> int:
    """Rows of ``y`` (its last dimension a row) per program of the activations' backwards."""
    return max(1, min(256, ACTIVATION_BLOCK_BYTES // (y.shape[-1] * y.element_size())))


def activation_backward_and_bias(
    dy: torch.Tensor, y: torch.Tensor, activation: str = "tanh"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dz, its sum over every dimension but the last in float32)`` for ``y`` (and ``dy``) of a
    power-of-two width, in one kernel: ``dz = dy * (1 - y^2)`` for ``y = tanh(z)``, ``dy`` where
    ``y > 0`` and 0 elsewhere for ``y = relu(z)``."""
    from gpu_marl_envs.baselines import policy_kernels

    width = y.shape[-1]
    dy, y = dy.contiguous().view(-1, width), y.contiguous().view(-1, width)
    n_rows = y.shape[0]
    block = rows_per_block(y)
    blocks = (n_rows + block - 1) // block
    dz = torch.empty_like(dy)
    partial = torch.empty(blocks, width, dtype=torch.float32, device=y.device)
    if blocks:
        policy_kernels.activation_backward_and_bias[(blocks,)](
            dy, y, dz, partial, n_rows, N=width, BLOCK=block, RELU=activation == "relu", num_warps=8
        )
    return dz, partial.sum(0)


def layer_gradients(ctx, dz: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, shape: torch.Size):
    """A layer's weight gradient from ``dz`` (rows of its pre-activation gradient) and its input
    ``x``, and its input gradient (``shape[:-1]`` rows) where autograd needs it, by cuBLAS."""
    dweight = dz.T @ x.reshape(-1, x.shape[-1])
    dx = (dz @ weight).view(*shape[:-1], weight.shape[1]) if ctx.needs_input_grad[0] else None
    return dx, dweight


class _LinearActivation(torch.autograd.Function):
    """``activation(x @ weight.T + bias)`` (all in one dtype; ``"tanh"`` or ``"relu"``): the ReLU's
    forward one product with the bias and the ReLU in its epilogue (:func:`relu_linear`), the
    tanh's a product and an in-place tanh; the backward :func:`activation_backward_and_bias` and
    cuBLAS for the products."""

    @staticmethod
    def forward(ctx, x, weight, bias, activation):
        if activation == "relu":
            y = relu_linear(x, weight, bias)
        else:
            y = F.linear(x, weight, bias).tanh_()  # in place: the product itself is not needed again
        ctx.activation = activation
        ctx.save_for_backward(x, weight, y)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, y = ctx.saved_tensors
        dz, dbias = activation_backward_and_bias(dy, y, ctx.activation)
        return (*layer_gradients(ctx, dz, x, weight, y.shape), dbias.to(weight.dtype), None)


class _TanhValueHead(torch.autograd.Function):
    """``tanh(x @ weight.T + bias) @ head_weight.T + head_bias`` (a critic's last hidden layer and
    its single output, all in one dtype). PyTorch's backward writes the head's input gradient
    (``dv`` times its weights, as wide as the layer) and reads it back for the tanh, with
    unaligned single-column products; here one kernel
    (:func:`policy_kernels.tanh_value_head_backward`) goes from ``dv`` straight to the layer's
    ``dz`` and all three bias and head gradients, and cuBLAS does the layer's two products. On an
    H200, TagContinuous's runner critic at 5 M rows spent 2.9 ms in the head's backward and 2.1 ms
    in the tanh's before."""

    @staticmethod
    def forward(ctx, x, weight, bias, head_weight, head_bias):
        h = F.linear(x, weight, bias).tanh_()
        ctx.save_for_backward(x, weight, h, head_weight)
        return F.linear(h, head_weight, head_bias)

    @staticmethod
    def backward(ctx, dv):
        from gpu_marl_envs.baselines import policy_kernels

        x, weight, h, head_weight = ctx.saved_tensors
        width = h.shape[-1]
        h2 = h.view(-1, width)
        n_rows = h2.shape[0]
        block = rows_per_block(h)
        blocks = (n_rows + block - 1) // block
        dz = torch.empty_like(h2)
        partial = torch.empty(blocks, 2 * width + 1, dtype=torch.float32, device=h.device)
        if blocks:
            policy_kernels.tanh_value_head_backward[(blocks,)](
                dv.contiguous().view(-1), h2, head_weight, dz, partial, n_rows, N=width, BLOCK=block, num_warps=8
            )
        sums = partial.sum(0).to(weight.dtype)
        return (
            *layer_gradients(ctx, dz, x, weight, h.shape),
            sums[:width],
            sums[width : 2 * width].view(1, width),
            sums[2 * width :],
        )
