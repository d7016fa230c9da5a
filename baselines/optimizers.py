"""Adam and RMSprop for the trainers, without ``torch.optim.Optimizer``.

Why: in a fresh process, making any ``torch.optim`` optimizer imports ``torch._dynamo``
(``Optimizer.add_param_group`` is wrapped in ``torch._disable_dynamo``, which imports it at its
first call; ``step``'s wrapper and the update functions' guards import it too), whether or not
anything is compiled. That import took 0.9 s on a 2-core CPU and about 5 s on the H100 host: most
of the 8.5 s that PPO's first run in a fresh process took to reach a CartPole return of 475,
against about 1 s for a later run. These classes
call the same ATen kernels that ``torch.optim`` calls, in the same order, so the updates are
bitwise the same, and they import nothing of the compiler:

- :class:`Adam` is ``torch.optim.Adam(fused=True)`` (``capturable=True`` when ``lr`` is a
  tensor): ``torch._fused_adam_``, one kernel per step on CUDA, also implemented on the CPU;
- :class:`RMSprop` is ``torch.optim.RMSprop(foreach=True)`` (its ``capturable=True`` update when
  ``lr`` is a tensor on an accelerator; ``torch.optim`` allows that flag only there).

Only the options the trainers use are implemented; others are refused with a ``ValueError``.
``state_dict()`` is in ``torch.optim``'s format, so checkpoints written by either load into the
other. The state, the step counts included, lives on the parameters' device, as
``torch.optim``'s ``capturable=True`` keeps it, so a ``step()`` can be captured in a CUDA graph;
a graph reads a learning rate that changes between replays only from a tensor (``lr`` given as
a device tensor and changed in place).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch.optim.optimizer import _global_optimizer_post_hooks

_STEP_DTYPE = torch.float32  # the step counts' dtype in torch.optim's fused and capturable state


class Optimizer:
    """What :class:`Adam` and :class:`RMSprop` share: one parameter group on one device, lazily
    created state, ``zero_grad`` and the state dict. Not a ``torch.optim.Optimizer``.

    A subclass names its hyperparameters (``HYPERPARAMETERS``, the group's keys besides
    ``params``), the ``torch.optim`` options whose values it implements (``FIXED``: a saved group
    or a keyword argument with another value is refused) and the state tensors it keeps per
    parameter besides ``step`` (``STATE``)."""

    HYPERPARAMETERS: tuple[str, ...]
    FIXED: dict[str, object]
    STATE: tuple[str, ...]

    def __init__(self, params: Iterable[torch.Tensor], options: dict, **hyperparameters) -> None:
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__} got no parameters")
        if not all(isinstance(p, torch.Tensor) for p in params):
            raise ValueError(
                f"{type(self).__name__} takes an iterable of tensors (one parameter group), "
                "not parameter-group dicts or named parameters"
            )
        kinds = {(p.device, p.dtype) for p in params}
        if len(kinds) != 1 or not params[0].is_floating_point():
            raise ValueError(
                f"{type(self).__name__} needs floating-point parameters of one device and dtype, "
                f"got {sorted(map(str, kinds))}: make one optimizer per device and dtype"
            )
        self._check_options(options)
        self.device = params[0].device
        # defaults: the hyperparameters as given, as torch.optim keeps them (Lightning reads them).
        self.defaults = self._checked(**hyperparameters)
        self.param_groups = [{"params": params, **self.defaults}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def _checked(self, lr, eps, **others) -> dict:
        """The hyperparameters, checked (``ValueError`` naming the bad one) and in the types the
        update takes; a subclass checks its own ``others``."""
        if isinstance(lr, torch.Tensor):
            if lr.numel() != 1 or lr.device != self.device:
                raise ValueError(
                    f"a tensor lr must have one element on the parameters' device {self.device}, "
                    f"got shape {tuple(lr.shape)} on {lr.device}"
                )
            lr = lr.reshape(())
        elif lr >= 0.0:
            lr = float(lr)
        else:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not eps >= 0.0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        return {"lr": lr, "eps": float(eps)}

    @classmethod
    def _check_options(cls, options: dict) -> None:
        for name, value in options.items():
            if name not in cls.FIXED:
                raise ValueError(
                    f"{cls.__name__} has no option {name!r}; it implements only "
                    f"{', '.join(cls.HYPERPARAMETERS)} (use torch.optim.{cls.__name__} for more)"
                )
            if value != cls.FIXED[name]:
                raise ValueError(
                    f"{cls.__name__} implements only {name}={cls.FIXED[name]!r}, got {value!r} "
                    f"(use torch.optim.{cls.__name__} for that)"
                )

    @property
    def params(self) -> list[torch.Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """As ``torch.optim``'s: drop the gradients, or zero them in place (one launch per dtype;
        a captured update keeps writing its gradients into the same tensors)."""
        if set_to_none:
            for p in self.params:
                p.grad = None
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        for grad in grads:
            if grad.grad_fn is not None:
                grad.detach_()
            else:
                grad.requires_grad_(False)
        if grads:
            torch._foreach_zero_(grads)

    def step(self, closure: Callable[[], object] | None = None):
        """One update of the parameters that have a gradient (the others are skipped, as by
        ``torch.optim``); their state is created, zeros, at the first step that sees a gradient.
        Then the hooks registered with ``torch.optim.optimizer.register_optimizer_step_post_hook``
        run, as after any ``torch.optim`` step (the multi-GPU test watches every step this way).

        ``closure``, as ``torch.optim``'s: called first (with gradients enabled), to compute the
        gradients this step applies; its result is returned (Lightning's ``optimizer.step()``
        passes one that runs its ``on_before_optimizer_step`` hooks)."""
        result = None
        if closure is not None:
            with torch.enable_grad():
                result = closure()
        params = [p for p in self.params if p.grad is not None]
        for p in params:
            if p.grad.is_sparse:
                raise ValueError(f"{type(self).__name__} does not support sparse gradients")
            if p not in self.state:
                self.state[p] = {
                    "step": torch.zeros((), dtype=_STEP_DTYPE, device=p.device),
                    **{name: torch.zeros_like(p, memory_format=torch.preserve_format) for name in self.STATE},
                }
        if params:
            with torch.no_grad():
                self._update(params, [p.grad for p in params], [self.state[p] for p in params])
        for hook in list(_global_optimizer_post_hooks.values()):
            hook(self, (), {})
        return result

    def state_dict(self) -> dict:
        """``torch.optim``'s format: ``{"state": {index: {"step": ..., name: ...}}, "param_groups":
        [{hyperparameters, torch.optim's flags for this update, "params": [0, 1, ...]}]}``; the
        tensors are this optimizer's own, not copies (as ``torch.optim`` returns them)."""
        group = self.param_groups[0]
        index = {p: i for i, p in enumerate(group["params"])}
        flags = self._torch_flags(isinstance(group["lr"], torch.Tensor))
        return {
            "state": {index[p]: dict(state) for p, state in self.state.items()},
            "param_groups": [
                {
                    **{name: group[name] for name in self.HYPERPARAMETERS},
                    **self.FIXED,
                    **flags,
                    "params": list(range(len(group["params"]))),
                }
            ],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state dict of this class or of the same ``torch.optim`` optimizer (fused,
        foreach or neither, capturable or not: they compute the same update). The
        hyperparameters, ``lr`` included, become the saved ones (a saved tensor ``lr`` is copied to
        this optimizer's device); state tensors are copied to their parameters' device and dtype,
        ``step`` as float32. Raises ``ValueError``, changing nothing, where the saved optimizer
        used an option this class does not implement or had other parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(
                f"the saved optimizer had parameter groups of {[len(g['params']) for g in groups]} "
                f"parameters; this one has one group of {len(self.params)}"
            )
        saved = groups[0]
        missing = [name for name in self.HYPERPARAMETERS if name not in saved]
        if missing:
            raise ValueError(f"the saved optimizer has no {missing}: was it a torch.optim.{type(self).__name__}?")
        implementation = set(self._torch_flags(False))
        self._check_options(
            {
                name: value
                for name, value in saved.items()
                if name not in (*self.HYPERPARAMETERS, "params", *implementation)
            }
        )
        values = {name: saved[name] for name in self.HYPERPARAMETERS}
        if isinstance(values["lr"], torch.Tensor):
            values["lr"] = values["lr"].detach().to(self.device, copy=True)
        hyperparameters = self._checked(**values)
        position = {index: i for i, index in enumerate(saved["params"])}
        state = {}
        for index, tensors in state_dict["state"].items():
            p = self.params[position[index]]
            if set(tensors) != {"step", *self.STATE}:
                raise ValueError(
                    f"the saved state of parameter {index} holds {sorted(tensors)}, not {sorted(['step', *self.STATE])}"
                )
            state[p] = {
                name: torch.as_tensor(value).to(
                    device=p.device, copy=True, dtype=_STEP_DTYPE if name == "step" else p.dtype
                )
                for name, value in tensors.items()
            }
        self.param_groups[0].update(hyperparameters)
        self.state = state

    def _torch_flags(self, tensor_lr: bool) -> dict[str, object]:
        """torch.optim's implementation flags that name this update (written into state dicts so
        that ``torch.optim`` continues with the same kernels; ignored when loading)."""
        raise NotImplementedError

    def _update(
        self, params: list[torch.Tensor], grads: list[torch.Tensor], states: list[dict[str, torch.Tensor]]
    ) -> None:
        """The update of ``params`` (all with gradients ``grads``) and their ``states``."""
        raise NotImplementedError


class Adam(Optimizer):
    """Adam (Kingma & Ba, 2015) as ``torch.optim.Adam(params, lr, betas, eps, fused=True)``, and
    ``capturable=True`` when ``lr`` is a tensor: the same ``torch._fused_adam_`` kernel after the
    same step-count increment, so parameters and state are bitwise those of ``torch.optim``. No
    weight decay, AMSGrad or maximisation (``ValueError`` if asked for)."""

    HYPERPARAMETERS = ("lr", "betas", "eps")
    FIXED = {
        "weight_decay": 0.0,
        "amsgrad": False,
        "maximize": False,
        "differentiable": False,
        "decoupled_weight_decay": False,
    }
    STATE = ("exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        **options,
    ) -> None:
        super().__init__(params, options, lr=lr, betas=betas, eps=eps)

    def _checked(self, betas, **others) -> dict:
        if len(betas) != 2 or not all(isinstance(beta, float) and 0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"betas must be two floats in [0, 1), got {betas}")
        return {**super()._checked(**others), "betas": tuple(betas)}

    def _torch_flags(self, tensor_lr: bool) -> dict[str, object]:
        return {"foreach": None, "fused": True, "capturable": tensor_lr}

    def _update(self, params, grads, states) -> None:
        group = self.param_groups[0]
        steps = [state["step"] for state in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adam_(
            params,
            grads,
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )


class RMSprop(Optimizer):
    """RMSprop (Hinton's lecture 6e; ``torch.optim``'s form, eps added after the square root) as
    ``torch.optim.RMSprop(params, lr, alpha, eps, foreach=True)``: the same ``torch._foreach_*``
    operations in the same order, so the results are bitwise equal. With ``lr`` a tensor on an
    accelerator it runs ``capturable=True``'s update, which reads the learning rate from the
    tensor (a CUDA graph replays it with the current value); with a float ``lr``, or a tensor on
    the CPU (where ``torch.optim`` has no capturable update), the one that takes ``lr`` as a
    number. No momentum, centring, weight decay or maximisation (``ValueError`` if asked for)."""

    HYPERPARAMETERS = ("lr", "alpha", "eps")
    FIXED = {"weight_decay": 0.0, "momentum": 0.0, "centered": False, "maximize": False, "differentiable": False}
    STATE = ("square_avg",)

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float | torch.Tensor = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        **options,
    ) -> None:
        super().__init__(params, options, lr=lr, alpha=alpha, eps=eps)

    def _checked(self, alpha, **others) -> dict:
        if not alpha >= 0.0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        return {**super()._checked(**others), "alpha": float(alpha)}

    def _torch_flags(self, tensor_lr: bool) -> dict[str, object]:
        return {"foreach": True, "capturable": tensor_lr and self.device.type != "cpu"}

    def _update(self, params, grads, states) -> None:
        group = self.param_groups[0]
        lr, alpha = group["lr"], group["alpha"]
        square_avgs = [state["square_avg"] for state in states]
        torch._foreach_add_([state["step"] for state in states], 1)
        torch._foreach_mul_(square_avgs, alpha)
        torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - alpha)
        avg = torch._foreach_sqrt(square_avgs)
        torch._foreach_add_(avg, group["eps"])
        if isinstance(lr, torch.Tensor) and lr.device.type != "cpu":
            torch._foreach_div_(avg, -lr)
            torch._foreach_addcdiv_(params, grads, avg)
        else:
            torch._foreach_addcdiv_(params, grads, avg, value=-float(lr))
