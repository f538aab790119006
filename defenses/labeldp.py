"""Label differential privacy: ALIBI and its Gaussian twin AGIBI (Malek, Mironov, Prasad, Shilov,
Tramer, "Antipodes of Label Differential Privacy: PATE and ALIBI", NeurIPS 2021, section 4 and
appendix D; facts in ``../shared/reference/labeldp-notes.md``).

Label-DP protects the *labels* only: neighbouring datasets differ in one example's label.

1. **Noise, once.** Each training label y becomes ``o = onehot(y) + noise``, drawn once per example
   before training: Laplace with scale ``b = 2 / eps`` per coordinate (ALIBI; changing a label moves
   ``onehot(y)`` by 2 in L1) or Gaussian ``N(0, sigma^2)`` (AGIBI; L2 sensitivity sqrt(2), epsilon
   from the Renyi-DP of the Gaussian mechanism at ``delta``). Everything after is post-processing.
2. **Bayesian soft labels.** Given o and a prior p(y), the posterior over the true label is
   ``softmax_c((|o_c| - |o_c - 1|) / b + log p_c)`` (Laplace: only the coordinates o_k differ
   between the likelihoods ``exp(-||o - e_k||_1 / b)``) or ``softmax_c(o_c / sigma^2 + log p_c)``
   (Gaussian: ``-||o - e_k||^2 / (2 sigma^2)`` differs across k by ``o_k / sigma^2``). AGIBI's
   ``posterior="authors"`` takes the authors' code's ``softmax_c(o_c / sigma + log p_c)`` instead
   (their ``Ohm._map_normal``): Bayes' rule only at sigma = 1, flatter below it (the label
   epsilons above about 7 at delta 1e-5), sharper above it. ALIBI's posterior is the authors'.
3. **Iterative inference.** The prior is the model's current prediction. ``prior="batch"`` (the
   authors' released code, ``Ohm`` with ``mapwithprior``): on every step, the detached softmax of
   the model's output on the same augmented batch. ``prior=k`` (an integer, the paper's text:
   "periodically"): the soft labels of all N examples are recomputed from the model's predictions on
   the un-augmented training images every k epochs, from a uniform prior at the start.
4. The model trains with cross-entropy against the soft labels, with the preset's recipe.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from defenses.base import (Defense, FitContext, LabeledImages, Normalizer, PrivacyKnob, ServedModel, TorchClassifier,
                           is_int, is_number)
from defenses.training import init_network, train_classifier

if TYPE_CHECKING:  # torch where a model trains: naming the defense needs none
    import torch
    from torch import nn

#: Renyi orders for AGIBI's epsilon (those of the authors' ``RandomizedLabelPrivacy``: 1.1 ... 99.9)
RDP_ORDERS = tuple(i / 10.0 for i in range(11, 1000))


def laplace_scale(epsilon: float) -> float:
    """ALIBI's Laplace scale b = 2 / eps (the L1 sensitivity of a one-hot label is 2)."""
    if not epsilon > 0:
        raise ValueError(f"epsilon must be positive, got {epsilon}")
    return 2.0 / epsilon


@functools.cache
def _opacus_rdp() -> Any:
    """Opacus's Renyi-DP analysis, ``opacus/accountants/analysis/rdp.py`` (math, numpy and scipy only),
    read from its file without running ``opacus/__init__.py``, which imports torch: AGIBI finds its
    noise scale when it is built, and the attack phase builds it without training anything. Where
    the file is not there (another Opacus layout), the module itself."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("opacus")  # locates the package without running it
    path = Path(next(iter(spec.submodule_search_locations or []), "")) / "accountants" / "analysis" / "rdp.py" \
        if spec is not None else None
    if path is None or not path.is_file():
        import opacus.accountants.analysis.rdp as rdp

        return rdp
    file_spec = importlib.util.spec_from_file_location("harness_opacus_rdp", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def gaussian_label_epsilon(sigma: float, delta: float) -> float:
    """AGIBI's label epsilon at ``delta``: the Gaussian mechanism with L2 sensitivity sqrt(2) and noise
    ``sigma`` (noise multiplier sigma / sqrt(2)), applied once, converted from Renyi DP (opacus)."""
    rdp_analysis = _opacus_rdp()
    compute_rdp, get_privacy_spent = rdp_analysis.compute_rdp, rdp_analysis.get_privacy_spent

    rdp = compute_rdp(q=1.0, noise_multiplier=sigma / math.sqrt(2.0), steps=1, orders=list(RDP_ORDERS))
    eps, _ = get_privacy_spent(orders=list(RDP_ORDERS), rdp=rdp, delta=delta)
    return float(eps)


def gaussian_sigma_for(epsilon: float, delta: float, tol: float = 1e-6) -> float:
    """The smallest sigma whose :func:`gaussian_label_epsilon` is at most ``epsilon`` (bisection on
    log sigma; the epsilon decreases with sigma)."""
    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got epsilon={epsilon}, delta={delta}")
    lo, hi = math.log(1e-3), math.log(1e3)
    with warnings.catch_warnings():  # probes far from the answer sit at the ends of the Renyi orders
        warnings.simplefilter("ignore", UserWarning)
        if gaussian_label_epsilon(math.exp(hi), delta) > epsilon:
            raise ValueError(f"epsilon {epsilon} is too small for AGIBI at delta {delta}")
        if gaussian_label_epsilon(math.exp(lo), delta) <= epsilon:
            raise ValueError(f"epsilon {epsilon} is too large for AGIBI at delta {delta} (sigma below 1e-3)")
        while hi - lo > tol:
            mid = 0.5 * (lo + hi)
            if gaussian_label_epsilon(math.exp(mid), delta) > epsilon:
                lo = mid
            else:
                hi = mid
    return math.exp(hi)


def laplace_posterior(noisy: torch.Tensor, log_prior: torch.Tensor, scale: float) -> torch.Tensor:
    """ALIBI's posterior p(y = c | o) = softmax_c((|o_c| - |o_c - 1|) / b + log p_c), rows of (N, K)."""
    import torch

    return torch.softmax((noisy.abs() - (noisy - 1.0).abs()) / scale + log_prior, dim=1)


def gaussian_posterior(noisy: torch.Tensor, log_prior: torch.Tensor, sigma: float) -> torch.Tensor:
    """AGIBI's posterior p(y = c | o) = softmax_c(o_c / sigma^2 + log p_c), rows of (N, K): Bayes'
    rule with the likelihoods exp(-||o - e_c||^2 / (2 sigma^2))."""
    import torch

    return torch.softmax(noisy / sigma**2 + log_prior, dim=1)


def gaussian_posterior_authors(noisy: torch.Tensor, log_prior: torch.Tensor, sigma: float) -> torch.Tensor:
    """The authors' code's AGIBI soft labels softmax_c(o_c / sigma + log p_c), rows of (N, K)
    (``Ohm._map_normal`` of ``label_dp_antipodes``): :func:`gaussian_posterior` at sigma = 1 only."""
    import torch

    return torch.softmax(noisy / sigma + log_prior, dim=1)


#: AGIBI's ``posterior`` parameter: Bayes' rule (the default) or the authors' code's form
GAUSSIAN_POSTERIORS = {"derived": gaussian_posterior, "authors": gaussian_posterior_authors}


def soft_cross_entropy(logits: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -sum_c soft_c log softmax(logits)_c."""
    import torch.nn.functional as F

    return -(soft * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


class LabelDP(Defense):
    """Shared by ALIBI and AGIBI: noise the labels once, train on Bayesian soft labels."""

    mechanism: ClassVar[str]
    reference = "https://arxiv.org/abs/2106.03408"  # Malek et al., NeurIPS 2021 (ALIBI; AGIBI in its appendix)
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)
    recipe_note = "label-DP trains with the preset's recipe on soft labels"
    param_defaults: ClassVar[dict[str, Any]] = {"epsilon": 8.0, "prior": "batch"}
    param_types: ClassVar[dict[str, tuple[type, ...]]] = {"prior": (str, int)}
    #: the label epsilon: the smaller, the noisier the labels
    privacy_knobs: ClassVar[tuple[PrivacyKnob, ...]] = (
        PrivacyKnob("epsilon", (0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 19.0, 30.0), "lower"),)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        eps, prior = self.params["epsilon"], self.params["prior"]
        if not is_number(eps) or not math.isfinite(eps) or eps <= 0:
            raise ValueError(f"epsilon must be a positive number (the label epsilon), got {eps!r}")
        if prior != "batch" and (not is_int(prior) or prior < 1):
            raise ValueError(f"prior must be 'batch' (refresh on every step, the authors' code) or a positive "
                             f"integer number of epochs between refreshes, got {prior!r}")

    # --- the mechanism -------------------------------------------------------------------------
    def noise_scale(self) -> float:
        raise NotImplementedError

    def draw_noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def posterior(self, noisy: torch.Tensor, log_prior: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def privacy_record(self) -> dict[str, Any]:
        raise NotImplementedError

    # --- training ------------------------------------------------------------------------------
    def noisy_labels(self, y: np.ndarray, num_classes: int, seed: int) -> np.ndarray:
        """o = onehot(y) + noise, (N, K) float32, drawn once from ``seed``."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1AB]))
        onehot = np.eye(num_classes, dtype=np.float64)[y]
        return (onehot + self.draw_noise(onehot.shape, rng)).astype(np.float32)

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        import torch
        import torch.nn.functional as F

        noisy = self.noisy_labels(train.y, train.num_classes, ctx.seed)
        net = init_network(train, ctx)
        prior = self.params["prior"]
        uniform = torch.full((len(train), train.num_classes), -math.log(train.num_classes))
        if prior == "batch":
            def loss_fn(z: torch.Tensor, o: torch.Tensor, epoch: int) -> torch.Tensor:
                soft = self.posterior(o, F.log_softmax(z.detach(), dim=1))
                return soft_cross_entropy(z, soft)

            net = train_classifier(net, train, ctx, targets=noisy, loss_fn=loss_fn)
        else:
            noisy_t = torch.from_numpy(noisy)
            normalize = Normalizer(train.mean, train.std, ctx.device)

            def refresh(epoch: int, model: nn.Module) -> np.ndarray | None:
                if epoch == 0:
                    log_prior = uniform
                elif epoch % prior == 0:
                    log_prior = _log_predictions(model, train.x, normalize)
                else:
                    return None
                return self.posterior(noisy_t, log_prior).numpy().astype(np.float32)

            net = train_classifier(net, train, ctx, targets=self.posterior(noisy_t, uniform).numpy(),
                                   loss_fn=lambda z, soft, epoch: soft_cross_entropy(z, soft), epoch_hook=refresh)
        changed = float((noisy.argmax(1) != train.y).mean())
        record = {**self.privacy_record(), "label_prior": prior, "noisy_argmax_changed": changed}
        return TorchClassifier(net, train.mean, train.std, ctx.device, record=record)


def _log_predictions(model: nn.Module, x: np.ndarray, normalize: Normalizer, batch_size: int = 1024) -> torch.Tensor:
    """log softmax of ``model`` (eval mode) on un-augmented images, on the CPU."""
    import torch
    import torch.nn.functional as F

    model.eval()
    with torch.no_grad():
        out = [F.log_softmax(model(normalize(torch.from_numpy(x[i : i + batch_size]))), dim=1).float().cpu()
               for i in range(0, len(x), batch_size)]
    return torch.cat(out)


class ALIBI(LabelDP):
    """ALIBI: Laplace label noise (b = 2 / eps) + iterative Bayesian inference."""

    name = "alibi"
    mechanism = "laplace"
    description = "label-DP (labels only): Laplace-noised one-hot labels, Bayesian soft labels (ALIBI)"

    def noise_scale(self) -> float:
        return laplace_scale(float(self.params["epsilon"]))

    def draw_noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        return rng.laplace(0.0, self.noise_scale(), size=shape)

    def posterior(self, noisy: torch.Tensor, log_prior: torch.Tensor) -> torch.Tensor:
        return laplace_posterior(noisy, log_prior, self.noise_scale())

    def privacy_record(self) -> dict[str, Any]:
        return {"label_epsilon": float(self.params["epsilon"]), "label_delta": 0.0, "label_mechanism": "laplace",
                "label_noise_scale": self.noise_scale()}


class AGIBI(LabelDP):
    """AGIBI: Gaussian label noise calibrated to (eps, delta) + iterative Bayesian inference."""

    name = "agibi"
    mechanism = "gaussian"
    description = "label-DP (labels only): Gaussian-noised one-hot labels, Bayesian soft labels (AGIBI)"
    param_defaults: ClassVar[dict[str, Any]] = {**LabelDP.param_defaults, "epsilon": 19.0, "delta": 1e-5,
                                                "posterior": "derived"}

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        d, form = self.params["delta"], self.params["posterior"]
        if not is_number(d) or not 0 < d < 1:
            raise ValueError(f"delta must be in (0, 1), got {d!r}")
        if form not in GAUSSIAN_POSTERIORS:
            raise ValueError(f"posterior must be 'derived' (Bayes' rule, softmax(o / sigma^2 + log p)) or 'authors' "
                             f"(the authors' code, softmax(o / sigma + log p)), got {form!r}")
        self._sigma = gaussian_sigma_for(float(self.params["epsilon"]), float(d))

    def noise_scale(self) -> float:
        return self._sigma

    def draw_noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, self._sigma, size=shape)

    def posterior(self, noisy: torch.Tensor, log_prior: torch.Tensor) -> torch.Tensor:
        return GAUSSIAN_POSTERIORS[self.params["posterior"]](noisy, log_prior, self._sigma)

    def privacy_record(self) -> dict[str, Any]:
        return {"label_epsilon": float(self.params["epsilon"]), "label_delta": float(self.params["delta"]),
                "label_mechanism": "gaussian", "label_noise_scale": self._sigma,
                "label_posterior": self.params["posterior"]}


# Three utility levels, the label epsilons of Malek et al.'s CIFAR-10 Table 6 (ALIBI: 94.0 / 84.2 /
# 71.0% accuracy; AGIBI: 93.5 / 84.3 / 71.3%); the presets set each dataset's own epsilons.
class ALIBIHigh(ALIBI):
    name = "alibi-high"
    param_defaults: ClassVar[dict[str, Any]] = {**ALIBI.param_defaults, "epsilon": 8.0}


class ALIBIMedium(ALIBI):
    name = "alibi-medium"
    param_defaults: ClassVar[dict[str, Any]] = {**ALIBI.param_defaults, "epsilon": 2.1}


class ALIBILow(ALIBI):
    name = "alibi-low"
    param_defaults: ClassVar[dict[str, Any]] = {**ALIBI.param_defaults, "epsilon": 1.0}


class AGIBIHigh(AGIBI):
    name = "agibi-high"
    param_defaults: ClassVar[dict[str, Any]] = {**AGIBI.param_defaults, "epsilon": 19.0}


class AGIBIMedium(AGIBI):
    name = "agibi-medium"
    param_defaults: ClassVar[dict[str, Any]] = {**AGIBI.param_defaults, "epsilon": 7.7}


class AGIBILow(AGIBI):
    name = "agibi-low"
    param_defaults: ClassVar[dict[str, Any]] = {**AGIBI.param_defaults, "epsilon": 3.7}
