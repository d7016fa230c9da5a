"""The default policies: an MLP actor and an MLP critic (CleanRL's layout and initialisation).

``ActorCritic(observation_size, action_space)`` works for ``Discrete`` (categorical),
``MultiDiscrete`` (one categorical per component) and ``Box`` (diagonal Gaussian, state-independent
standard deviation: free, ``exp`` of a parameter, or bounded by ``max_std``; or, for a box of finite
bounds, one Beta distribution per component, ``distribution="beta"``) action spaces. A
custom policy is any ``torch.nn.Module`` with the same three methods:
``sample(obs) -> action``, ``value(obs) -> (B,)`` and
``action_and_value(obs, action=None) -> (action, log_prob, entropy, value)``; to be captured in a
CUDA graph they must not synchronise with the host (no ``.item()``, no ``torch.distributions``
argument validation).

Action masks (``Discrete`` and ``MultiDiscrete``): ``sample``, ``action_and_value`` and ``greedy``
take ``action_mask``, a bool tensor over the logits (``(..., n)``; ``(..., sum(nvec))`` for
``MultiDiscrete``, each component's entries side by side), ``True`` where an action is allowed.
Masked logits become the most negative finite number of their dtype rather than ``-inf``: their
probability is exactly 0, and the entropy's ``p * log p`` is ``0 * (finite)`` = 0 instead of
``0 * -inf`` = NaN, so log-probabilities, entropies and gradients stay finite. Every component
needs at least one allowed action. Without a mask (``None``) the arithmetic is unchanged.
"""

from __future__ import annotations

import math
import typing
from typing import Literal

import numpy as np
import torch
from gpu_marl_envs.baselines import fused_mlp, sampling, wide_mlp
from gpu_marl_envs.baselines.obs_norm import ObservationNormalizer
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
Distribution = Literal["gaussian", "beta"]
Activation = Literal["tanh", "relu"]
ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}
"""The hidden layers' activations: CleanRL's tanh (the default), or WarpDrive's ReLU."""
DISTRIBUTIONS = typing.get_args(Distribution)
"""The ``Box`` heads: a diagonal Gaussian (whose draws the env clips into the box) or a Beta per
component, scaled to the box's bounds (its draws always inside)."""
# The largest float32 below 1: a Beta draw kept below it keeps log(1 - x) finite.
BELOW_ONE = 1.0 - 2.0**-24


def layer(inputs: int, outputs: int, gain: float = math.sqrt(2)) -> nn.Linear:
    linear = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


def mask_logits(logits: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with the entries ``action_mask`` forbids set to the dtype's most negative finite
    number (no host sync: one ``where``)."""
    if action_mask is None:
        return logits
    return torch.where(action_mask, logits, torch.finfo(logits.dtype).min)


def hidden_layers(inputs: int, hidden: tuple[int, ...], activation: Activation = "tanh") -> list[nn.Module]:
    """``Linear, activation`` for each hidden size in turn, from ``inputs`` features."""
    sizes = (inputs, *hidden)
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [layer(a, b), ACTIVATIONS[activation]()]
    return layers


def mlp(
    inputs: int, hidden: tuple[int, ...], outputs: int, last_gain: float, activation: Activation = "tanh"
) -> nn.Sequential:
    return nn.Sequential(*hidden_layers(inputs, hidden, activation), layer((inputs, *hidden)[-1], outputs, last_gain))


class ActorCritic(nn.Module):
    def __init__(
        self,
        observation_size: int,
        action_space: spaces.Space,
        hidden: tuple[int, ...] = (64, 64),
        normalize_observations: bool = False,
        *,
        critic: nn.Module | None = None,
        max_std: float = math.inf,
        distribution: Distribution = "gaussian",
        activation: Activation = "tanh",
        shared: bool = False,
    ):
        """``normalize_observations``: the networks see observations scaled by their running mean
        and variance (:class:`~gpu_marl_envs.baselines.obs_norm.ObservationNormalizer`, ``obs_norm``;
        the trainer updates it from each rollout). ``critic``: the value network, made before the
        actor (by default an MLP on the observations; :class:`CentralisedActorCritic` passes its
        own). ``activation``: the hidden layers', ``"tanh"`` or ``"relu"``. ``shared``: the actor
        and the critic share their hidden layers (``trunk``, WarpDrive's ``FullyConnected``) and are
        each one output layer on them, so the value loss trains the shared layers too; otherwise
        each is an MLP of its own (CleanRL's layout). ``max_std`` (``Box`` only): ``inf``, the
        Gaussian's std is ``exp(log_std)``, free (CleanRL's, starting at 1); a number, it is
        ``max_std * sigmoid(std_logit)``, starting at ``max_std * sigmoid(1)`` (MAPPO's Gaussian
        head; see ``PolicyConfig.max_std``).
        ``distribution`` (``Box`` only): ``"gaussian"`` or ``"beta"`` (``PolicyConfig.distribution``
        says when to choose which; the box's bounds must then be finite)."""
        super().__init__()
        self.obs_norm = ObservationNormalizer(observation_size) if normalize_observations else None
        if isinstance(action_space, spaces.Discrete):
            self.nvec = [int(action_space.n)]
        elif isinstance(action_space, spaces.MultiDiscrete):
            self.nvec = [int(n) for n in np.asarray(action_space.nvec).ravel()]
        elif isinstance(action_space, spaces.Box):
            self.nvec = None
        else:
            raise TypeError(f"ActorCritic supports Discrete, MultiDiscrete and Box action spaces, got {action_space}")
        self.space = action_space
        self.beta = self._beta_head(action_space, distribution, max_std)
        # Components of one size (Tag's two moves) are handled as one (..., components, n) tensor.
        self.uniform = self.nvec is not None and len(set(self.nvec)) == 1
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        if shared and critic is not None:
            raise ValueError("shared hidden layers read the observations: a critic of its own cannot share them")
        self.trunk = nn.Sequential(*hidden_layers(observation_size, hidden, activation)) if shared else None
        inputs, hidden = ((observation_size, *hidden)[-1], ()) if shared else (observation_size, hidden)
        self.critic = mlp(inputs, hidden, 1, 1.0, activation) if critic is None else critic
        outputs = sum(self.nvec) if self.nvec else int(np.prod(action_space.shape))
        # A Beta head reads two outputs per component: its two concentrations.
        self.actor = mlp(inputs, hidden, 2 * outputs if self.beta else outputs, 0.01, activation)
        if self.beta:
            low, high = (
                torch.as_tensor(bound, dtype=torch.float32).flatten() for bound in (action_space.low, action_space.high)
            )
            self.register_buffer("low", low)
            self.register_buffer("scale", high - low)
        elif math.isfinite(max_std) and self.nvec is None:
            # A buffer, not a number: a trainer moves the bound on a schedule (set_max_std) between
            # the replays of graphs that read it. Not saved: the schedule is the config's.
            self.register_buffer("log_max_std", torch.tensor(math.log(max_std)), persistent=False)
            self.std_logit = nn.Parameter(torch.ones(outputs))
        elif self.nvec is None:
            self.log_std = nn.Parameter(torch.zeros(outputs))
        self.fused = False

    @staticmethod
    def _beta_head(space: spaces.Space, distribution: Distribution, max_std: float) -> bool:
        """Whether the policy's head is a Beta per component (``ValueError`` where it cannot be)."""
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
        if distribution == "gaussian":
            return False
        if not isinstance(space, spaces.Box) or not space.is_bounded("both") or not np.all(space.high > space.low):
            raise ValueError(
                f'distribution = "beta" needs a Box action space of finite bounds, each high one above its low one, '
                f"got {space}"
            )
        if math.isfinite(max_std):
            raise ValueError('max_std bounds the Gaussian head\'s std; a "beta" head has none (leave max_std at inf)')
        return True

    def beta_distribution(self, out: torch.Tensor) -> torch.distributions.Beta:
        """The Beta head's distributions over ``[0, 1]`` for the actor's outputs ``out``: the
        concentrations ``1 + softplus`` of the two halves, so at least 1 (every density unimodal and
        finite at the bounds; Chou, Maturana and Scherer 2017, "Improving Stochastic Policy Gradients
        in Continuous Control with Deep Reinforcement Learning using the Beta Distribution"). Not
        validated: validation synchronises with the host, and the rollout is captured."""
        alpha, beta = (1.0 + F.softplus(half) for half in out.float().chunk(2, dim=-1))
        return torch.distributions.Beta(alpha, beta, validate_args=False)

    def _unit(self, action: torch.Tensor) -> torch.Tensor:
        """A Beta head's ``action`` mapped back into ``[0, 1]``, kept off the bounds where rounding
        put it there (the densities' logs are finite inside)."""
        unit = (action - self.low) / self.scale
        return unit.clamp(torch.finfo(unit.dtype).tiny, BELOW_ONE)

    def gaussian_log_std(self) -> torch.Tensor:
        """``Box`` only: the log of the Gaussian's std per action component."""
        if hasattr(self, "std_logit"):
            return self.log_max_std + F.logsigmoid(self.std_logit)
        return self.log_std

    def set_max_std(self, max_std: float) -> None:
        """Move the bounded Gaussian head's bound of the std to ``max_std`` (in place, with no
        host sync: captured graphs read the new bound)."""
        if not hasattr(self, "std_logit"):
            raise ValueError("set_max_std needs a Gaussian head with a bounded std (ActorCritic(max_std=...) finite)")
        if not (math.isfinite(max_std) and max_std > 0):
            raise ValueError(f"max_std must be a finite number > 0, got {max_std!r}")
        self.log_max_std.fill_(math.log(max_std))

    def use_fused_mlp(self, setting: bool | str = True) -> bool:
        """Run the actor and the critic as :mod:`fused_mlp`'s Triton kernels where they can (float32
        passes on CUDA, outside autocast and ``torch.compile``; elsewhere the layers run as before).
        ``setting``: ``True`` (``ValueError`` if the networks have another shape than the kernels
        take), ``"auto"`` (only if they have that shape and Triton is installed; the trainers pass
        :meth:`CaptureOptions.fused_mlp_setting`, which also weighs the run's sizes) or ``False``.
        Returns whether the kernels are used."""
        shaped = fused_mlp.fusable(self.actor) and fused_mlp.fusable(self.critic)
        if setting is True and not shaped:
            raise ValueError(
                f"fused MLPs need two hidden layers of one width, a power of two from 16 to "
                f"{fused_mlp.MAX_HIDDEN}, and at most {fused_mlp.MAX_IO} inputs and outputs; "
                f"this policy's actor is {fused_mlp.widths(self.actor)}, its critic "
                f"{fused_mlp.widths(self.critic)}"
            )
        self.fused = setting is True or (setting == "auto" and shaped and fused_mlp.available())
        return self.fused

    def _inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """What the networks read: ``obs`` normalised (with ``obs_norm``) and, where the layers take
        :mod:`wide_mlp`'s path, aligned once for both networks (:func:`wide_mlp.aligned_input`)."""
        if self.obs_norm is not None:
            obs = self.obs_norm(obs)
        if not wide_mlp.applies(obs) or self._fused_for(obs):
            return obs
        return wide_mlp.aligned_input(obs, obs.shape[-1])

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        """What the actor's and the critic's own layers read: :meth:`_inputs`, through the shared
        hidden layers where there are some."""
        x = self._inputs(obs)
        return x if self.trunk is None else wide_mlp.run_mlp(self.trunk, x)

    def _fused_for(self, x: torch.Tensor) -> bool:
        return (
            self.fused
            and x.is_cuda
            and x.dtype == torch.float32
            and not x.requires_grad
            and not torch.is_autocast_enabled("cuda")
            and not torch.compiler.is_compiling()
        )

    def _run(self, network: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        """``network`` on ``x`` (from :meth:`_inputs`)."""
        return fused_mlp.mlp_forward(network, x) if self._fused_for(x) else wide_mlp.run_mlp(network, x)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._run(self.critic, self._features(obs)).squeeze(-1)

    # The distributions are written out rather than taken from torch.distributions: its argument
    # validation synchronises with the host, and sampling must stay capturable in a CUDA graph.
    def sample(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """An action drawn from the policy (the rollout's only use of the networks), never a masked one."""
        out = self._run(self.actor, self._features(obs))
        if self.uniform and sampling.kernel_applies(out):
            actions = sampling.gumbel_max_kernel(out, len(self.nvec), action_mask)
            return actions.squeeze(-1) if isinstance(self.space, spaces.Discrete) else actions
        if self.beta:
            unit = self.beta_distribution(out).sample().clamp_(max=BELOW_ONE)
            return self.low + self.scale * unit
        out = out.float()  # the noise in float32, also where the network ran in bfloat16
        if self.nvec is None:
            self._no_mask(action_mask)
            return out + self.gaussian_log_std().exp() * torch.randn_like(out)
        # Gumbel-max: argmax(logits + Gumbel noise) is a draw from the categorical of the logits;
        # the noise of every component is drawn at once.
        uniform = torch.rand_like(out)
        if action_mask is not None:
            # A uniform draw of exactly 0 gives noise -inf; where every allowed action of a
            # component drew it, the argmax could fall on a masked one. Keep the noise finite.
            uniform = uniform.clamp_(min=torch.finfo(uniform.dtype).tiny)
        return self._argmax(mask_logits(out - uniform.log().neg().log(), action_mask))

    def action_and_value(
        self, obs: torch.Tensor, action: torch.Tensor | None = None, action_mask: torch.Tensor | None = None
    ):
        """``(action, log_prob, entropy, value)``; the action is drawn where none is given. With a
        mask, the distribution is the softmax over the allowed actions only."""
        if action is None:
            action = self.sample(obs, action_mask)
        out, value = self.outputs_and_value(obs)
        return (action, *self._log_prob_and_entropy(out, action, action_mask), value)

    def outputs_and_value(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's outputs (logits, a Gaussian's means, or a Beta head's two halves) and the
        critic's value on ``obs``."""
        if self.trunk is not None:
            joint = self.joint_outputs(obs)
            width = self.actor[-1].out_features
            return joint[..., :width], joint[..., width]
        x = self._features(obs)
        return self._run(self.actor, x), self._run(self.critic, x).squeeze(-1)

    def joint_outputs(self, obs: torch.Tensor) -> torch.Tensor:
        """With shared hidden layers: the actor's outputs and the value side by side, from one
        product of both output layers (the shared layers' output read once, and its gradient
        written once rather than summed from two): ``(..., outputs + 1)``, or, on :mod:`wide_mlp`'s
        path, more columns, zero (the product's aligned width)."""
        if self.trunk is None:
            raise ValueError("joint_outputs needs shared hidden layers (ActorCritic(shared=True))")
        x = self._features(obs)
        actor, critic = self.actor[-1], self.critic[-1]
        weight, bias = torch.cat([actor.weight, critic.weight]), torch.cat([actor.bias, critic.bias])
        return wide_mlp.affine(weight, bias, x, padded=True) if wide_mlp.applies(x) else F.linear(x, weight, bias)

    def _log_prob_and_entropy(self, out: torch.Tensor, action: torch.Tensor, action_mask: torch.Tensor | None):
        """The log-probability of ``action`` and the entropy under the actor's outputs ``out``."""
        if self.beta:
            self._no_mask(action_mask)
            # Densities over the box: the unit interval's, less the log of the box's width.
            distribution, log_scale = self.beta_distribution(out), self.scale.log()
            log_prob = (distribution.log_prob(self._unit(action)) - log_scale).sum(-1)
            return log_prob, (distribution.entropy() + log_scale).sum(-1)
        if self.nvec is None:
            self._no_mask(action_mask)
            log_std = self.gaussian_log_std().expand_as(out)
            log_prob = (-0.5 * ((action - out) / log_std.exp()) ** 2 - log_std - HALF_LOG_2PI).sum(-1)
            entropy = (0.5 + HALF_LOG_2PI + log_std).sum(-1)
            return log_prob, entropy
        out = mask_logits(out, action_mask)
        parts = action.unsqueeze(-1) if isinstance(self.space, spaces.Discrete) else action
        if self.uniform:
            log_probs = out.unflatten(-1, (len(self.nvec), self.nvec[0])).log_softmax(-1)
            log_prob = log_probs.gather(-1, parts.unsqueeze(-1)).sum((-2, -1))
            entropy = -(log_probs.exp() * log_probs).sum((-2, -1))
            return log_prob, entropy
        log_probs = [logits.log_softmax(-1) for logits in out.split(self.nvec, dim=-1)]
        log_prob = sum(lp.gather(-1, parts[..., i : i + 1]).squeeze(-1) for i, lp in enumerate(log_probs))
        entropy = sum(-(lp.exp() * lp).sum(-1) for lp in log_probs)
        return log_prob, entropy

    def greedy(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The most likely (allowed) action (the mean for Box spaces), for evaluation."""
        out = self._run(self.actor, self._features(obs))
        if self.beta:
            return self.low + self.scale * self.beta_distribution(out).mean
        if self.nvec is None:
            self._no_mask(action_mask)
            return out
        return self._argmax(mask_logits(out, action_mask))

    def _no_mask(self, action_mask) -> None:
        if action_mask is not None:
            raise ValueError(f"action masks apply to Discrete and MultiDiscrete action spaces, not {self.space}")

    def _argmax(self, scores: torch.Tensor) -> torch.Tensor:
        """The index of the largest score of each component: the action."""
        if isinstance(self.space, spaces.Discrete):
            return scores.argmax(-1)
        if self.uniform:
            return scores.unflatten(-1, (len(self.nvec), self.nvec[0])).argmax(-1)
        return torch.stack([part.argmax(-1) for part in scores.split(self.nvec, dim=-1)], dim=-1)


class CentralisedCritic(nn.Module):
    """MAPPO's centralised value function for the agents of one policy: ``V(s, i)``, an MLP (tanh,
    as the actor's) on the game's global state ``s`` (``(S,)``, ``GpuParallelEnv.state()``) and,
    where the policy has several agents (which share the network), agent ``i``'s one-hot id among
    them.

    The first layer's product splits: ``W [s; onehot(i)] + b = (W_s s + b) + W[:, S + i]``. So the
    state's part is computed once per game and each agent adds its own column: a game's state is
    read once, not once per agent, and a rollout keeps one state per game (Tag's 7,810 values for
    its 110 agents would otherwise be stored 110 times). The parameters are those of one layer on
    the concatenation (``input.weight`` is ``(hidden[0], S + ids)``), initialised as one.

    ``normalize_state``: the state is scaled by its running mean and variance (``state_norm``,
    an :class:`~gpu_marl_envs.baselines.obs_norm.ObservationNormalizer`; the trainer updates it)."""

    def __init__(
        self,
        state_size: int,
        agents: int,
        hidden: tuple[int, ...] = (64, 64),
        normalize_state: bool = False,
        activation: Activation = "tanh",
    ):
        super().__init__()
        self.state_size, self.agents = state_size, agents
        self.ids = agents if agents > 1 else 0  # one agent: no id
        self.state_norm = ObservationNormalizer(state_size) if normalize_state else None
        self.input = layer(state_size + self.ids, hidden[0])
        self.rest = nn.Sequential(ACTIVATIONS[activation](), *mlp(hidden[0], hidden[1:], 1, 1.0, activation))

    def project(self, state: torch.Tensor) -> torch.Tensor:
        """The state's part of the first layer, ``(..., S) -> (..., hidden[0])`` (bias included)."""
        if self.state_norm is not None:
            state = self.state_norm(state)
        return F.linear(state, self.input.weight[:, : self.state_size], self.input.bias)

    def forward(self, state: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Every agent's value, ``(..., S) -> (..., agents)``; or, with ``rows`` (int64 ``(R,)``),
        the values ``(R,)`` of those rows of the flattened ``(games, agents)`` grid of ``state``
        (``(games, S)``): row ``r`` is agent ``r % agents`` of game ``r // agents``. The state's
        part is computed for the rows' games where there are fewer rows than games, else for every
        game and then picked (fixed shapes either way: no host synchronisation)."""
        if rows is None:
            hidden = self.project(state).unsqueeze(-2)  # (..., 1, H)
            if self.ids:
                hidden = hidden + self.input.weight[:, self.state_size :].t()  # (..., agents, H)
            return wide_mlp.run_mlp(self.rest, hidden).squeeze(-1)
        games = rows // self.agents
        hidden = self.project(state[games]) if len(rows) < len(state) else self.project(state)[games]
        if self.ids:
            # The ids' columns as the one-hot product: its gradient is a matrix product, where picking
            # rows of few columns would add up the rows' gradients in an indexed backward (on an H200
            # at 20,000 games of 100 agents and 7,810 state values, 500,000 rows: 5.9 ms a forward
            # and backward instead of 9.2).
            ids = F.one_hot(rows % self.agents, self.agents).to(hidden.dtype)
            hidden = hidden + ids @ self.input.weight[:, self.state_size :].t().to(hidden.dtype)
        return wide_mlp.run_mlp(self.rest, hidden).squeeze(-1)


class CentralisedActorCritic(ActorCritic):
    """:class:`ActorCritic` with a :class:`CentralisedCritic` (MAPPO): the actor reads the agent's
    own observation, as before (``sample``, ``greedy``); the critic reads the game's global state
    and the agent's id. ``value(state, rows=None)`` is the critic's; ``action_and_value(obs,
    action, action_mask, *, state, rows=None)`` takes the critic's input beside the actor's, the
    values in the order of ``obs``' rows: ``obs`` is ``(games * agents, ...)`` (or ``(games,
    agents, ...)``) with ``state`` ``(games, S)``, or the rows ``rows`` of that grid (a minibatch).

    ``normalize_observations`` normalises the state too (the critic's ``state_norm``). The fused
    MLP kernels run the actor only."""

    def __init__(
        self,
        observation_size: int,
        action_space: spaces.Space,
        state_size: int,
        agents: int,
        hidden: tuple[int, ...] = (64, 64),
        normalize_observations: bool = False,
        max_std: float = math.inf,
        distribution: Distribution = "gaussian",
        activation: Activation = "tanh",
    ):
        super().__init__(
            observation_size,
            action_space,
            hidden,
            normalize_observations,
            critic=CentralisedCritic(state_size, agents, hidden, normalize_observations, activation),
            max_std=max_std,
            distribution=distribution,
            activation=activation,
        )

    def use_fused_mlp(self, setting: bool | str = True) -> bool:
        shaped = fused_mlp.fusable(self.actor)
        if setting is True and not shaped:
            raise ValueError(
                f"fused MLPs need two hidden layers of one width, a power of two from 16 to "
                f"{fused_mlp.MAX_HIDDEN}, and at most {fused_mlp.MAX_IO} inputs and outputs; "
                f"this policy's actor is {fused_mlp.widths(self.actor)}"
            )
        self.fused = setting is True or (setting == "auto" and shaped and fused_mlp.available())
        return self.fused

    def value(self, state: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        return self.critic(state, rows)

    def action_and_value(
        self,
        obs: torch.Tensor,
        action: torch.Tensor | None = None,
        action_mask: torch.Tensor | None = None,
        *,
        state: torch.Tensor,
        rows: torch.Tensor | None = None,
    ):
        if action is None:
            action = self.sample(obs, action_mask)
        out = self._run(self.actor, self._features(obs))
        value = self.critic(state, rows).reshape(out.shape[:-1])
        return (action, *self._log_prob_and_entropy(out, action, action_mask), value)
