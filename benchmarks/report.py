"""What the benchmark scripts share: the GPU they ran on, and where their results go."""

from __future__ import annotations

import json

import torch


def gpu_hardware() -> str:
    """``"<GPU>, <SMs> SMs, torch <version>"`` of CUDA device 0; exits where there is no GPU."""
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}"


def save(args, text: str, record: dict) -> None:
    """The markdown ``text`` to ``args.out`` and ``record`` to ``args.json``, each where given."""
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
