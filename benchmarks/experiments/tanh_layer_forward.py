"""Would Tag A2C's tanh layers gain from one kernel for ``tanh(x @ W.T + b)`` (issue 44)? The profile
(``docs/benchmarks/training.md``) spends 9.5 ms of a 64 ms iteration in ``tanh`` kernels alone and
4.7 ms in bfloat16 casts, beside cuBLAS's GEMMs (whose epilogues add the bias but have no tanh).

For the layers of WarpDrive's Tag config ([256, 256] on 71 observations, padded to 72 as
``wide_mlp`` pads them; bfloat16 under autocast), at a rollout step's rows (1,000 games x 110
agents) and an update's (x 50 steps), µs per call of:

- ``cuBLAS + tanh``: ``torch.tanh(F.linear(x, W, b))``, what the trainer runs today;
- ``Triton, fused``: one Triton kernel (:func:`linear_tanh`, autotuned over :data:`CONFIGS`): the
  product accumulated in float32, the bias and the tanh applied before the one bfloat16 store;
- ``torch.compile``: the same function compiled with ``mode="max-autotune-no-cudagraphs"`` (Inductor
  may choose a Triton GEMM template with the tanh in its epilogue).

Each is checked against the float32 product (max absolute difference; the fused kernel rounds once,
where the others round the product to bfloat16 before the tanh). Timed with CUDA events over
``--repeats`` calls after a warm-up (autotuning and compiling done).

    python benchmarks/experiments/tanh_layer_forward.py --out tanh-layer.md --json tanh-layer.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# The suite's modules (report) sit one folder up: this script runs from experiments/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from report import add_output_options, cuda_us, gpu_hardware, save  # noqa: E402

SHAPES = [(110_000, 72, 256), (110_000, 256, 256), (5_500_000, 72, 256), (5_500_000, 256, 256)]
"""(rows, inputs, outputs): a rollout step's and an update's rows, each hidden layer."""
CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [
        (128, 256, 64, 8, 3),
        (128, 128, 64, 4, 4),
        (128, 128, 32, 4, 4),
        (64, 256, 64, 4, 3),
        (256, 128, 64, 8, 3),
        (64, 128, 32, 4, 4),
    ]
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def linear_tanh(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``y = tanh(x @ w.T + b)`` for contiguous ``x (M, K)``, ``w (N, K)``, ``b (N,)``, ``y (M, N)``."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc += tl.dot(a, b)
    z = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    # tanh(z) = 2 sigmoid(2z) - 1: near 0 it loses relative precision, far below bfloat16's step.
    y = 2.0 * tl.sigmoid(2.0 * z) - 1.0
    tl.store(
        y_ptr + rm[:, None] * N + rn[None, :], y.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N)
    )


def fused(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    (m, k), n = x.shape, w.shape[0]
    y = torch.empty(m, n, device=x.device, dtype=x.dtype)
    linear_tanh[lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))](x, w, b, y, m, n, k)
    return y


def eager(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.tanh(F.linear(x, w, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile row")
    add_output_options(parser)
    args = parser.parse_args()
    hardware = gpu_hardware()
    ways = {"cuBLAS + tanh": eager, "Triton, fused": fused}
    if not args.no_compile:
        ways["torch.compile (max-autotune)"] = torch.compile(eager, mode="max-autotune-no-cudagraphs")
    g = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for m, k, n in SHAPES:
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
        b = (0.1 * torch.randn(n, device="cuda", generator=g)).bfloat16()
        exact = torch.tanh(x.float() @ w.float().T + b.float())
        for name, fn in ways.items():
            error = (fn(x, w, b).float() - exact).abs().max().item()
            us = cuda_us(lambda fn=fn, x=x, w=w, b=b: fn(x, w, b), args.repeats)
            rows.append({"rows": m, "inputs": k, "outputs": n, "way": name, "us": us, "max_abs_error": error})
            print(f"{m:,} x {k} -> {n}: {name}: {us:.1f} µs (max error {error:.2e})", flush=True)
    lines = [
        f"Hardware: {hardware}. Command: `python benchmarks/experiments/tanh_layer_forward.py`.",
        "",
        "`tanh(x @ W.T + b)` in bfloat16, µs per call (max absolute error against float32):",
        "",
        "| rows | layer | " + " | ".join(ways) + " |",
        "|---:|---|" + "---:|" * len(ways),
    ]
    for m, k, n in SHAPES:
        cells = [r for r in rows if (r["rows"], r["inputs"], r["outputs"]) == (m, k, n)]
        lines.append(
            f"| {m:,} | {k} -> {n} | " + " | ".join(f"{r['us']:.1f} ({r['max_abs_error']:.1e})" for r in cells) + " |"
        )
    save(args, "\n".join(lines), {"hardware": hardware, "results": rows})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
