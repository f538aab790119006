"""DP-SGD's training machinery, for one model (:class:`DPSGDTrainer`) and for a group trained stacked
(:mod:`defenses.dpsgd_stacked` builds on it): the sampling schedule, the accountants, per-sample
gradients, clipping, the settings and the trainer. The defenses that use it, and the paper's
settings, are in :mod:`defenses.dpsgd` (its docstring states the algorithm and the sources)."""

from __future__ import annotations

import copy
import functools
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from defenses.base import FitContext, LabeledImages, Normalizer
from defenses.dpsgd_layers import LayerClipper, clip_factors
from defenses.dpsgd_layers import supports as supports_layer_clipping
from defenses.training import RowGather
from harness.core.lazy import LazyModule

if TYPE_CHECKING:
    from opacus.accountants.accountant import IAccountant

# torch and Opacus are imported where a model trains or an accountant runs: naming the defense (the
# attack phase, the reports) needs neither
torch = LazyModule("torch")
nn = LazyModule("torch.nn")

Grads = dict[str, "torch.Tensor"]

#: the networks whose DP-SGD models train stacked (defenses/dpsgd_stacked.py): small ones; WRN16-4's
#: per-sample gradients (2.7 M parameters x physical batch x augmult) already fill a GPU for one model
STACKABLE_DP_MODELS = ("mlp", "cnn-gn")

#: Largest discretization grid the PRV accountant may use (points). Opacus's PRV accountant needs
#: about 250 bytes per point; the paper's noise levels need 1e8 points or more (tens of GB).
PRV_MAX_GRID_POINTS = 4_000_000


# --- schedule and accounting --------------------------------------------------------------------


POISSON_RATES = ("paper", "b_over_n")


def sample_rate(n: int, batch_size: int, mode: str = "paper") -> float:
    """Poisson sampling rate: ``1 / ceil(N / B)`` (``paper``: Opacus's DataLoader, as the paper's
    code) or ``min(1, B / N)`` (``b_over_n``)."""
    if n < 1:
        raise ValueError("DP-SGD needs at least one training sample")
    if mode == "paper":
        return 1.0 / steps_per_epoch(n, batch_size)
    if mode == "b_over_n":
        return min(1.0, batch_size / n)
    raise ValueError(f"poisson_rate must be one of {', '.join(POISSON_RATES)}, got {mode!r}")


def expected_batch_size(n: int, q: float, mode: str = "paper") -> float:
    """The denominator of the noisy mean gradient: ``int(N q)`` (``paper``, as Opacus) or ``q N``."""
    return float(int(n * q)) if mode == "paper" else q * n


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Logical steps per epoch, ``ceil(N / B)`` (as the paper's Poisson data loader)."""
    return max(1, math.ceil(n / batch_size))


def ema_decay_at(step: int, max_decay: float) -> float:
    """EMA decay after logical step ``step`` (1-based): ``min(max_decay, (1 + t) / (10 + t))``."""
    return min(max_decay, (1.0 + step) / (10.0 + step))


ACCOUNTANTS = ("rdp", "prv")


def make_accountant(name: str) -> IAccountant:
    """A fresh Opacus accountant: ``rdp`` (RDPAccountant) or ``prv`` (PRVAccountant)."""
    if name not in ACCOUNTANTS:
        raise ValueError(f"accountant must be 'rdp' or 'prv', got {name!r}")
    from opacus.accountants import PRVAccountant, RDPAccountant

    return RDPAccountant() if name == "rdp" else PRVAccountant()


def prv_grid_points(noise_multiplier: float, q: float, steps: int, delta: float, eps_error: float = 0.01) -> float:
    """Size of the grid Opacus's PRV accountant discretizes on, for ``get_epsilon(delta)`` with its
    default errors (``eps_error`` 0.01, ``delta_error = delta / 1000``).

    Gopi et al. 2021 (remark 5.6), as Opacus implements it: the domain is ``[-L, L]`` with
    ``L = max(eps_RDP(delta_error / 4) over all steps, eps_RDP(delta_error / (8 T)) of one step) + 3``
    and the mesh is ``eps_error / sqrt(T log(12 / delta_error) / 2)``.
    """
    if noise_multiplier <= 0:
        return math.inf
    delta_error = delta / 1000
    from opacus.accountants import RDPAccountant

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the")
        full, one = RDPAccountant(), RDPAccountant()
        full.history = [(noise_multiplier, q, steps)]
        one.history = [(noise_multiplier, q, 1)]
        half_width = max(full.get_epsilon(delta_error / 4), one.get_epsilon(delta_error / (8 * steps)), eps_error) + 3
    mesh = eps_error / math.sqrt(steps * math.log(12 / delta_error) / 2)
    return math.floor(2 * half_width / mesh) + 1.0


def check_accountant(name: str, noise_multiplier: float, q: float, steps: int, delta: float) -> None:
    """Raise ``ValueError`` before training if the accountant cannot report epsilon for this run."""
    make_accountant(name)
    if name == "prv" and steps > 0:
        points = prv_grid_points(noise_multiplier, q, steps, delta)
        if points > PRV_MAX_GRID_POINTS:
            raise ValueError(
                f"the PRV accountant would need a grid of {points:.3g} points (limit {PRV_MAX_GRID_POINTS:.3g}) "
                f"for noise {noise_multiplier}, sample rate {q:.4g}, {steps} steps; use accountant=rdp"
            )


def epsilon_of(accountant: IAccountant, delta: float) -> float:
    """Epsilon at ``delta`` of the steps the accountant recorded (0 before any step; inf without noise)."""
    if not accountant.history:
        return 0.0
    if any(sigma <= 0 for sigma, _, _ in accountant.history):
        return math.inf
    with warnings.catch_warnings():
        # RDP warns when the optimal order is the smallest one (tiny noise); epsilon is still an upper bound.
        warnings.filterwarnings("ignore", message="Optimal order is the")
        return float(accountant.get_epsilon(delta=delta))


#: the largest noise multiplier :func:`noise_for_epsilon` searches (a target below the epsilon there is refused)
MAX_SOLVED_NOISE = 1e4


def epsilon_for_noise(accountant: str, noise_multiplier: float, q: float, steps: int, delta: float) -> float:
    """Epsilon at ``delta`` after ``steps`` Poisson-sampled steps at rate ``q`` and ``noise_multiplier``
    (a fresh accountant of the kind the run uses, as :class:`DPSGDTrainer` records it)."""
    acc = make_accountant(accountant)
    acc.history = [(noise_multiplier, q, steps)] if steps else []
    return epsilon_of(acc, delta)


@functools.lru_cache(maxsize=256)  # models whose training sets give the same rate and steps solve once
def noise_for_epsilon(target_epsilon: float, q: float, steps: int, delta: float, accountant: str = "rdp",
                      rtol: float = 1e-4) -> float:
    """The smallest noise multiplier (to a relative ``rtol``) whose epsilon at ``delta`` after ``steps``
    steps at rate ``q`` is at most ``target_epsilon``, by the run's accountant (as Opacus's
    ``get_noise_multiplier``, by bisection on a log scale). The returned noise always gives an epsilon
    <= the target. ValueError where no noise up to :data:`MAX_SOLVED_NOISE` reaches it (the
    accountant's epsilon has a floor: RDP's is about ``log(1/delta) / (max order - 1)``)."""
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise ValueError(f"target_epsilon must be a positive number, got {target_epsilon!r}")
    eps = lambda sigma: epsilon_for_noise(accountant, sigma, q, steps, delta)  # noqa: E731
    hi = 1.0
    while eps(hi) > target_epsilon:
        if hi >= MAX_SOLVED_NOISE:
            raise ValueError(f"target_epsilon {target_epsilon:g} is below what the {accountant} accountant certifies at "
                             f"any noise multiplier up to {MAX_SOLVED_NOISE:g} for {steps} steps at sampling rate "
                             f"{q:.4g} (delta {delta:g}): choose a larger target")
        hi *= 2.0
    lo = hi / 2.0
    while eps(lo) <= target_epsilon and lo > 1e-6:
        hi, lo = lo, lo / 2.0
    while hi / lo > 1 + rtol:  # eps(lo) > target >= eps(hi)
        mid = math.sqrt(lo * hi)
        if eps(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return hi


# --- one step -----------------------------------------------------------------------------------


def per_sample_grad_fn(net: nn.Module) -> Callable[[Grads, Grads, torch.Tensor, torch.Tensor], Grads]:
    """``f(params, buffers, x, y) -> {name: (n, *shape)}``: for x (n, K, C, H, W) and y (n,), the
    gradient of ``mean_k CE(net(x[i, k]), y[i])`` for each sample i, i.e. the average of the
    gradients of its K augmented copies (augmentation multiplicity)."""

    def loss_one(params: Grads, buffers: Grads, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(net, (params, buffers), (xs,))
        return nn.functional.cross_entropy(out, ys.expand(xs.shape[0]))

    return torch.func.vmap(torch.func.grad(loss_one), in_dims=(None, None, 0, 0))


def _is_linear_head(net: nn.Module) -> bool:
    """Whether ``net`` is one linear layer on flattened fixed features (``scatter-linear``'s head)."""
    from defenses.scatter_models import ScatterLinear

    return isinstance(net, ScatterLinear)


def linear_clipped_sum(fc: nn.Linear, x: torch.Tensor, y: torch.Tensor, max_grad_norm: float,
                       sq_norms: torch.Tensor | None = None) -> Grads:
    """``sum_i min(1, C / ||g_i||) g_i`` for a linear layer ``z = W x + b`` under cross-entropy,
    without forming the per-sample gradients: sample i's gradient is ``(d_i x_i^T, d_i)`` with
    ``d_i = softmax(z_i) - onehot(y_i)``, so ``||g_i||^2 = ||d_i||^2 (||x_i||^2 + 1)`` and the clipped
    sum is ``(F D)^T X`` and ``sum_i f_i d_i`` (F the clip factors). The same sum as the per-sample
    gradients of :func:`per_sample_grad_fn` (K = 1), in two matrix products (tests/test_dpsgd_scatter.py).
    ``sq_norms``: the rows' ``||x_i||^2`` where already known."""
    with torch.no_grad():
        d = torch.softmax(nn.functional.linear(x, fc.weight, fc.bias), dim=1)
        d[torch.arange(len(y), device=d.device), y] -= 1.0
        xx = (x * x).sum(1) if sq_norms is None else sq_norms
        norms = torch.sqrt((d * d).sum(1) * (xx + 1.0))
        fd = d * clip_factors(norms, max_grad_norm)[:, None]
        return {"fc.weight": fd.t() @ x, "fc.bias": fd.sum(0)}


def per_sample_norms(grads: Grads) -> torch.Tensor:
    """L2 norm of each sample's gradient over all parameters: (n,)."""
    per_param = [torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads.values()]
    return torch.linalg.vector_norm(torch.stack(per_param), dim=0)


def clip_per_sample(grads: Grads, max_grad_norm: float) -> tuple[Grads, torch.Tensor]:
    """Each sample's gradient scaled by ``min(1, C / ||g_i||)``, and the norms before clipping.
    Gradients with norm <= C are returned unchanged."""
    norms = per_sample_norms(grads)
    f = clip_factors(norms, max_grad_norm)
    return {k: g * f.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}, norms


def sum_clipped(grads: Grads, max_grad_norm: float) -> Grads:
    """``sum_i min(1, C / ||g_i||) g_i`` per parameter (the sum of :func:`clip_per_sample`'s
    gradients, as one contraction over the samples without the clipped copies)."""
    f = clip_factors(per_sample_norms(grads), max_grad_norm)
    return {k: torch.tensordot(f, g, dims=1) for k, g in grads.items()}


@dataclass(frozen=True)
class DPSGDSettings:
    """The mechanism's hyperparameters (see the module docstring for the formulas)."""

    noise_multiplier: float
    max_grad_norm: float
    batch_size: int
    epochs: int
    lr: float
    augmult: int
    ema_decay: float
    delta: float
    accountant: str
    physical_batch_size: int
    poisson_rate: str = "paper"
    #: the epsilon ``noise_multiplier`` was solved for (:func:`noise_for_epsilon`), recorded; None: configured
    target_epsilon: float | None = None

    def __post_init__(self) -> None:
        if self.poisson_rate not in POISSON_RATES:
            raise ValueError(f"poisson_rate must be one of {', '.join(POISSON_RATES)}, got {self.poisson_rate!r}")
        if self.noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")
        if self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        for k in ("batch_size", "epochs", "augmult", "physical_batch_size"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} must be a positive integer, got {v!r}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must lie in [0, 1), got {self.ema_decay}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta}")
        if self.accountant not in ACCOUNTANTS:  # checked without building one (Opacus imports torch)
            raise ValueError(f"accountant must be 'rdp' or 'prv', got {self.accountant!r}")


class DPSGDTrainer:
    """DP-SGD with augmentation multiplicity and weight EMA on one network (one model's training).

    ``noisy_gradient`` is one logical step's privatized gradient; ``step`` applies it and updates
    the EMA and the accountant; ``train`` runs all epochs.
    """

    def __init__(self, net: nn.Module, train: LabeledImages, settings: DPSGDSettings, *, seed: int,
                 device: str, augment: bool) -> None:
        from defenses.scatter_models import fixed_features

        # a network on a fixed feature map trained without augmentation: its head is what DP-SGD
        # trains, on the training set's features computed once (the map has no parameters)
        self._fixed = None if augment else fixed_features(net)
        if self._fixed is not None:
            net = self._fixed.head
        for m in net.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                raise ValueError(
                    f"DP-SGD needs a model without BatchNorm (per-sample gradients), got {type(m).__name__}; "
                    "use model mlp, cnn-gn or wrn16-4-gn"
                )
        self.settings = settings
        self.device = torch.device(device)
        self.net = net.to(self.device).train()
        self.ema = copy.deepcopy(self.net).eval()
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.train_set = train
        self.augment = augment
        self.k = settings.augmult if augment else 1
        self.n = len(train)
        self.q = sample_rate(self.n, settings.batch_size, settings.poisson_rate)
        self.expected_batch = max(1.0, expected_batch_size(self.n, self.q, settings.poisson_rate))
        self.steps_per_epoch = steps_per_epoch(self.n, settings.batch_size)
        self.accountant = make_accountant(settings.accountant)
        self.step_count = 0
        self.empty_batches = 0
        self._x = torch.from_numpy(train.x).to(self.device)
        self._y = torch.from_numpy(train.y).to(self.device)
        self._normalize: Callable[[torch.Tensor], torch.Tensor] = Normalizer(train.mean, train.std, self.device)
        if self._fixed is not None:
            with torch.no_grad():
                self._x = self._fixed.features(self._normalize(self._x))
            self._normalize = lambda f: f
        self._linear_head = _is_linear_head(self.net) and self.k == 1
        if self._linear_head:  # each sample's ||x_i||^2, fixed: computed once; batches gathered into one buffer
            # in row chunks: the same per-row sums, without a squared copy of the whole matrix
            self._sq_norms = torch.cat([c.pow(2).sum(1) for c in self._x.flatten(1).split(256)])
            self._rows = RowGather(self._x.flatten(1))
        s_sample, s_noise = np.random.SeedSequence([seed, 0xD95]).generate_state(2)
        self.sample_gen = torch.Generator().manual_seed(int(s_sample))  # Poisson sampling, augmentations
        self.noise_gen = torch.Generator(device=self.device).manual_seed(int(s_noise))
        self._grad_fn = per_sample_grad_fn(self.net)
        # a network of Linear and Conv2d layers: the clipped sum layer by layer, without per-sample
        # gradients (defenses/dpsgd_layers.py); rows fixed for the whole training (features, no
        # augmentation) let its first layer's patch inner products be computed once
        self._layers = None
        if not self._linear_head and supports_layer_clipping(self.net):
            self._layers = LayerClipper(self.net, fixed_inputs=self._x if self._fixed is not None and self.k == 1
                                        else None)

    def _inputs(self, idx: torch.Tensor) -> torch.Tensor:
        """Normalized inputs (n, K, C, H, W): K independently augmented copies of each sample."""
        x = self._x[idx] if self.k == 1 else self._x[idx].repeat_interleave(self.k, dim=0)
        if self.augment:
            from harness.core.augment import random_augment

            x = random_augment(x, self.train_set.augment, self.sample_gen)
        x = self._normalize(x)
        return x.view(len(idx), self.k, *x.shape[1:])

    def clipped_sum(self, idx: torch.Tensor) -> Grads:
        """Sum over the samples ``idx`` of their clipped per-sample gradients, in physical batches
        (a linear head on fixed features: :func:`linear_clipped_sum`, the same sum in closed form; a
        network of Linear and Conv2d layers: :class:`defenses.dpsgd_layers.LayerClipper`)."""
        if self._linear_head:
            return linear_clipped_sum(self.net.fc, self._rows(idx), self._y[idx],
                                      self.settings.max_grad_norm, self._sq_norms[idx])
        if self._layers is not None:
            total = None
            fixed = self._fixed is not None and self.k == 1
            for i in range(0, len(idx), self.settings.physical_batch_size):
                chunk = idx[i : i + self.settings.physical_batch_size]
                part = self._layers.clipped_sum(self._inputs(chunk), self._y[chunk], self.settings.max_grad_norm,
                                                chunk if fixed else None)
                total = part if total is None else {k: total[k] + g for k, g in part.items()}
            if total is None:  # an empty Poisson batch: a zero sum
                total = {k: torch.zeros_like(p) for k, p in self.net.named_parameters()}
            return total
        params = {k: p.detach() for k, p in self.net.named_parameters()}
        buffers = {k: b.detach() for k, b in self.net.named_buffers()}
        total = {k: torch.zeros_like(p) for k, p in params.items()}
        for i in range(0, len(idx), self.settings.physical_batch_size):
            chunk = idx[i : i + self.settings.physical_batch_size]
            grads = self._grad_fn(params, buffers, self._inputs(chunk), self._y[chunk].view(-1, 1))
            for k, g in sum_clipped(grads, self.settings.max_grad_norm).items():
                total[k] += g
        return total

    def noisy_gradient(self, idx: torch.Tensor) -> Grads:
        """``(sum_i clip(g_i) + N(0, sigma^2 C^2 I)) / E`` (E the expected batch size) for the batch ``idx``."""
        return self.add_noise(self.clipped_sum(idx))

    def add_noise(self, total: Grads) -> Grads:
        """``(total + N(0, sigma^2 C^2 I)) / E``, the noise drawn per parameter in the network's order."""
        std = self.settings.noise_multiplier * self.settings.max_grad_norm
        out = {}
        for k, g in total.items():
            if std > 0:
                g = g + std * torch.randn(g.shape, generator=self.noise_gen, device=self.device, dtype=g.dtype)
            out[k] = g / self.expected_batch
        return out

    def poisson_batch(self) -> torch.Tensor:
        """Indices of one Poisson-sampled batch (each sample independently with probability q)."""
        mask = torch.rand(self.n, generator=self.sample_gen) < self.q
        return mask.nonzero().flatten().to(self.device)

    def update_ema(self) -> float:
        """``ema <- d ema + (1 - d) theta`` with the decay of the current step; buffers copied."""
        d = ema_decay_at(self.step_count, self.settings.ema_decay)
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), self.net.parameters()):
                e.mul_(d).add_(p.detach(), alpha=1.0 - d)
            for e, b in zip(self.ema.buffers(), self.net.buffers()):
                e.copy_(b)
        return d

    def step(self, idx: torch.Tensor) -> None:
        """One logical step on the batch ``idx``: privatized SGD update, EMA, accountant."""
        self.finish_step(self.clipped_sum(idx), len(idx))

    def finish_step(self, total: Grads, batch_size: int) -> None:
        """The step after the clipped sum ``total`` of a batch of ``batch_size`` samples: noise, the
        SGD update, the EMA and the accountant (:mod:`defenses.dpsgd_stacked` computes the sums of
        several models at once)."""
        if batch_size == 0:
            self.empty_batches += 1
        g = self.add_noise(total)
        with torch.no_grad():
            for k, p in self.net.named_parameters():
                p.add_(g[k], alpha=-self.settings.lr)
        self.step_count += 1
        self.update_ema()
        self.accountant.step(noise_multiplier=self.settings.noise_multiplier, sample_rate=self.q)

    def train(self, ctx: FitContext | None = None) -> nn.Module:
        """All epochs of ``steps_per_epoch`` Poisson steps; returns the EMA model (eval mode)."""
        for epoch in range(self.settings.epochs):
            for _ in range(self.steps_per_epoch):
                self.step(self.poisson_batch())
            if ctx is not None:
                ctx.report("train", (epoch + 1) / self.settings.epochs)
        self.net.eval()
        return self.served()

    def served(self) -> nn.Module:
        """The EMA model in eval mode, on images: the head wrapped back on its fixed feature map."""
        from defenses.scatter_models import FeatureNet

        return self.ema.eval() if self._fixed is None else FeatureNet(self.ema.eval())

    def info(self) -> dict[str, Any]:
        """The privacy record of the training so far (JSON-serializable)."""
        s = self.settings
        return {
            "epsilon": epsilon_of(self.accountant, s.delta),
            "delta": s.delta,
            "noise_multiplier": s.noise_multiplier,
            "sample_rate": self.q,
            "poisson_rate": s.poisson_rate,
            "steps": self.step_count,
            "accountant": s.accountant,
            "batch_size": s.batch_size,
            "expected_batch_size": self.expected_batch,
            "epochs": s.epochs,
            "augmult": self.k,
            "max_grad_norm": s.max_grad_norm,
            "lr": s.lr,
            "ema_decay": s.ema_decay,
            "train_size": self.n,
            "empty_batches": self.empty_batches,
            **({"target_epsilon": s.target_epsilon} if s.target_epsilon is not None else {}),
        }
