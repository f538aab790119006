"""The defense interface.

``Defense.fit(train, ctx) -> ServedModel``: train on a labeled dataset and return the model the
adversary queries. ``ServedModel.query`` is the black-box API (outputs after any test-time
defense); ``raw_query`` (before it), ``features`` (white-box) and ``splitai_query`` (SELENA's
Split-AI ensemble, which the deployed student does not serve) are optional. A defense declares
its default canary and its adaptive attacks (paper section 5.3: attacks must be adapted).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from harness.core.config import TrainConfig
from harness.core.data import AugmentSpec

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LabeledImages:
    """A training set: uint8 NCHW images and int64 labels, with the dataset's normalization."""

    x: np.ndarray
    y: np.ndarray
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: AugmentSpec

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class SavedModel:
    """A trained network read back from a run directory (``harness evaluate --save-models``), in
    eval mode on the job's device; ``source`` is the file it was read from."""

    net: torch.nn.Module
    source: str


@dataclass(frozen=True)
class FitContext:
    """What a defense may use besides the data: seed, device, the preset's recipe, progress.

    ``undefended``: for a defense that declares ``reuses_undefended``, the undefended model with
    this model's training set, seed and recipe, when the runner found one saved in a matching run
    (every training fingerprint checked, :mod:`harness.run.teachers`); None otherwise (train it).
    """

    seed: int
    device: str
    train: TrainConfig
    params: dict[str, Any] = field(default_factory=dict)
    progress: Callable[[str, float], None] | None = None
    undefended: SavedModel | None = None

    def report(self, what: str, fraction: float) -> None:
        if self.progress is not None:
            self.progress(what, fraction)


class ServedModel(ABC):
    """What the adversary can query."""

    @abstractmethod
    def query(self, x: np.ndarray) -> np.ndarray:
        """Black-box outputs for uint8 images (N, C, H, W): float32 logits (N, K), i.e. scores whose
        softmax is the served probability vector (log-probabilities are fine)."""

    def raw_query(self, x: np.ndarray) -> np.ndarray | None:
        """Outputs before any test-time defense, or None if the defense has none."""
        return None

    def features(self, x: np.ndarray) -> np.ndarray | None:
        """White-box features (e.g. penultimate activations), or None."""
        return None

    def splitai_query(self, x: np.ndarray) -> np.ndarray | None:
        """SELENA's Split-AI answer: float32 (N, K) log of the mean softmax of each input's L query
        teachers (for a training sample, the L teachers that never trained on it), or None for a
        defense without such an ensemble. The deployed model does not serve it; the
        misleading-evaluations paper queries it in its SELENA attacks (``splitai_nn``)."""
        return None

    def view_augmentation(self) -> Any:
        """The random augmentation the model was trained to be invariant to (an
        :class:`defenses.ssl_augment.SSLAugment` for the self-supervised defenses), or None: the
        contrastive signals draw their views with it (an adaptive attack knows the training recipe)."""
        return None

    def info(self) -> dict[str, Any]:
        """Facts about the trained model to record with it (JSON-serializable), e.g. a DP defense's
        ``epsilon``, ``delta``, ``noise_multiplier``, ``sample_rate`` and ``steps``."""
        return {}

    def model_state(self) -> dict[str, Any] | None:
        """What ``--save-models`` stores (torch-serializable: tensors, numbers, strings, lists,
        dicts), or None when the served model has no such state."""
        return None


def is_int(v: Any) -> bool:
    """An integer parameter value (numpy integers too), not a bool."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A real parameter value (numpy scalars too), not a bool."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list", tuple: "a list", dict: "a mapping", type(None): "null"}


def _has_kind(value: Any, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, (bool, np.bool_))
    if kind is int:
        return is_int(value)
    if kind is float:
        return is_number(value) and bool(np.isfinite(value))
    if kind in (list, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, kind)


def param_kind_error(value: Any, default: Any, accepted: tuple[type, ...] | None = None) -> str | None:
    """Why ``value`` cannot be a parameter whose default is ``default`` (None when it can).

    The accepted kinds are ``accepted`` when given, else the default's kind: a bool default takes
    true/false, an int default an integer, a float default any finite number, a string, list or
    mapping default the same; a None default takes anything (the defense checks it). This runs
    for built-in defenses and plugins alike, before any training."""
    if accepted is None:
        if default is None:
            return None
        accepted = (float,) if isinstance(default, float) else (type(default),)
    if any(_has_kind(value, k) for k in accepted):
        return None
    want = " or ".join(dict.fromkeys(_KIND_NAMES.get(k, k.__name__) for k in accepted))
    return f"must be {want} (default {default!r}), got {value!r}"


class Normalizer:
    """uint8 images (N, C, H, W) -> float32 ``(x / 255 - mean_c) / std_c`` on ``device``."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], device: str | torch.device) -> None:
        import torch  # here, not at the top: reading a run's results and attacking its signals need no torch

        self.device = torch.device(device)
        self.mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, -1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return (x.to(self.device, self.mean.dtype) / 255.0 - self.mean) / self.std


class TorchClassifier(ServedModel):
    """A torch classifier served as-is: normalizes uint8 inputs and returns its logits; ``info()``
    returns the ``record`` given at construction."""

    def __init__(self, net: torch.nn.Module, mean: tuple[float, ...], std: tuple[float, ...], device: str,
                 batch_size: int = 1024, record: dict[str, Any] | None = None) -> None:
        self.net = net.eval()
        self.device = device
        self.batch_size = batch_size
        self.mean, self.std = tuple(mean), tuple(std)
        self.normalize = Normalizer(mean, std, device)
        self._record = dict(record or {})

    def info(self) -> dict[str, Any]:
        """``record``: what the defense wants stored with the model (e.g. DP-SGD's privacy record)."""
        return dict(self._record)

    def model_state(self) -> dict[str, Any]:
        """The network's ``state_dict`` (on the CPU), its architecture record (``arch``: kind,
        image shape, classes, width, from :func:`defenses.models.build_model`; None for a network
        built otherwise) and the input normalization."""
        return {"arch": getattr(self.net, "harness_arch", None),
                "state_dict": {k: v.detach().cpu() for k, v in self.net.state_dict().items()},
                "mean": list(self.mean), "std": list(self.std)}

    def query(self, x: np.ndarray) -> np.ndarray:
        import torch

        outs = []
        with torch.no_grad():
            for i in range(0, len(x), self.batch_size):
                xb = torch.from_numpy(np.ascontiguousarray(x[i : i + self.batch_size]))
                outs.append(self.net(self.normalize(xb)).float().cpu())
        return torch.cat(outs).numpy() if outs else np.zeros((0, 0), np.float32)


@dataclass(frozen=True)
class PrivacyKnob:
    """A parameter of the defense that trades utility for privacy, with the grid ``harness tune``
    searches (docs/tuning.md): ``values`` of ``defense_params.<param>``, and the direction that is
    more private (``"higher"``: a larger value protects more, as DP-SGD's noise multiplier; ``"lower"``:
    a smaller one, as a label-DP epsilon). A defense lists its knobs in ``privacy_knobs`` in order of
    priority: among settings that all meet an accuracy target and none of which is more private than
    another in every knob, the tuner takes the one most private in the first knob, then the second."""

    param: str
    values: tuple[float, ...]
    more_private: str  # "higher" or "lower"

    def __post_init__(self) -> None:
        if self.more_private not in ("higher", "lower"):
            raise ValueError(f"privacy knob {self.param}: more_private must be 'higher' or 'lower', "
                             f"got {self.more_private!r}")
        if not self.values or len(set(self.values)) != len(self.values):
            raise ValueError(f"privacy knob {self.param}: values must be distinct and not empty, got {self.values}")

    def privacy_rank(self, value: float) -> float:
        """A key that grows with privacy: the value, or its negative where lower is more private."""
        return float(value) if self.more_private == "higher" else -float(value)


class Defense(ABC):
    """A membership-inference defense. Subclasses set the class attributes and implement ``fit``.

    ``params`` are the defense's own hyperparameters (``defense_params`` in the config); unknown
    keys must raise ``ValueError`` so that typos are caught before any training.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    #: an https URL of the defense's paper or code (the leaderboard links the defense's name to it;
    #: results.json ``defense_reference``); "" for none
    reference: ClassVar[str] = ""
    default_canary: ClassVar[str] = "mislabeled"
    adaptive_attacks: ClassVar[tuple[str, ...]] = ("lira",)
    ablation_attacks: ClassVar[tuple[str, ...]] = ()  # run and reported, never a headline
    #: what the served model offers besides ``query``: ``"raw_query"`` (outputs before a test-time
    #: defense), ``"features"`` (white-box encoder features) and/or ``"splitai_query"`` (SELENA's
    #: Split-AI ensemble); signals that need one of these are refused before training for a defense
    #: that does not declare it (harness.run.signals)
    provides: ClassVar[frozenset[str]] = frozenset()
    param_defaults: ClassVar[dict[str, Any]] = {}
    #: the ``train.*`` fields ``fit`` reads (None: all of them); an override of any other is refused
    train_fields: ClassVar[frozenset[str] | None] = None
    #: ``train.*`` fields one of the defense's own parameters replaces: {train field: parameter}
    train_aliases: ClassVar[dict[str, str]] = {}
    #: one line on how the defense trains, shown when a ``train.*`` override is refused
    recipe_note: ClassVar[str] = ""
    #: True for a defense that starts from the undefended model of its training set (DFKD's
    #: teacher): the runner then passes a matching saved undefended model as ``ctx.undefended``
    reuses_undefended: ClassVar[bool] = False
    #: parameters that only locate inputs and never change the trained models (DFKD's
    #: ``teacher_run``): left out of the run fingerprint
    plumbing_params: ClassVar[frozenset[str]] = frozenset()
    #: True for a defense whose models train outside the harness (``external``: ``harness plan`` /
    #: ``harness import``); ``harness evaluate`` refuses it before anything is written
    trained_outside: ClassVar[bool] = False
    #: the parameters that trade utility for privacy, with their grid and direction (:class:`PrivacyKnob`),
    #: in priority order: what ``harness tune DEFENSE --min-accuracy A`` searches
    privacy_knobs: ClassVar[tuple[PrivacyKnob, ...]] = ()
    #: parameters that replace another when set: {parameter: the one it replaces} (DP-SGD's
    #: ``target_epsilon`` replaces ``noise_multiplier``); one command setting both is refused
    replaces_params: ClassVar[dict[str, str]] = {}
    #: accepted types of a parameter whose default does not say it (e.g. ``{"prior": (str, int)}``);
    #: every other parameter must have its default's kind (:func:`param_kind_error`)
    param_types: ClassVar[dict[str, tuple[type, ...]]] = {}
    #: whether the runner may train a group of this defense's models by running their ``fit`` calls
    #: side by side, their ``train_classifier`` calls trained as one stacked loop
    #: (:mod:`defenses.cotrain`; :meth:`cotrains`). None: yes for a defense whose ``fit`` is defined
    #: outside this package (a plugin), no for a built-in (each declares :meth:`stacks` instead).
    #: False keeps every model's ``fit`` alone, one model per job.
    cotrain: ClassVar[bool | None] = None

    @classmethod
    def recipe_routing(cls, params: dict[str, Any]) -> tuple[frozenset[str] | None, dict[str, str], str]:
        """(``train_fields``, {train field: the dotted override it becomes}, ``recipe_note``), given the
        raw ``defense_params`` (see :mod:`harness.core.overrides`)."""
        return cls.train_fields, {f: f"defense_params.{p}" for f, p in cls.train_aliases.items()}, cls.recipe_note

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.param_defaults))
        if unknown:
            raise ValueError(
                f"defense {self.name!r} has no parameter(s) {unknown}; known: {sorted(self.param_defaults) or 'none'}"
            )
        for key, value in params.items():
            problem = param_kind_error(value, self.param_defaults[key], self.param_types.get(key))
            if problem:
                raise ValueError(f"{key} {problem}")
        self.params = {**self.param_defaults, **params}

    def check_config(self, cfg: Any) -> None:
        """Raise ``ValueError`` before any training if the resolved config (``ExperimentConfig``)
        cannot work with this defense (e.g. DP-SGD with a BatchNorm model). Default: nothing."""

    def check_train_size(self, smallest: int) -> None:
        """Raise ``ValueError`` before any training if a model's training set of ``smallest``
        samples (the smallest of the run's) is too small for this defense. Default: nothing."""

    @abstractmethod
    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        """Train on ``train`` and return the served model."""

    def stacks(self, train: Any) -> bool:
        """Whether :meth:`fit_group` trains several models at once for this recipe (``TrainConfig``);
        the runner then groups models into one job (``run.group_size``). Default: no."""
        return False

    def can_group(self, train: Any) -> bool:
        """:meth:`stacks`, and only when the class that defines ``fit_group`` also defines the ``fit``
        in effect: a subclass that overrides ``fit`` (a plugin wrapping the undefended model, say)
        is trained through its own ``fit``, one model at a time."""
        mro = type(self).__mro__
        owner = next(k for k in mro if "fit" in k.__dict__)
        return self.stacks(train) and owner is next(k for k in mro if "fit_group" in k.__dict__)

    def cotrains(self, train: Any) -> bool:
        """Whether the runner may train this defense's models in groups through their own ``fit``
        (co-trained, :mod:`defenses.cotrain`) for the recipe ``train`` (``TrainConfig``): not where
        :meth:`can_group` (the defense stacks its own models); else :attr:`cotrain` (None: where ``fit``
        is defined outside this package). The runner does so where the recipe's network trains
        stacked (:func:`harness.run.runner.trains_in_groups`)."""
        if self.can_group(train):
            return False
        if self.cotrain is not None:
            return bool(self.cotrain)
        owner = next(k for k in type(self).__mro__ if "fit" in k.__dict__)
        return not (owner.__module__ == "defenses" or owner.__module__.startswith("defenses."))

    def fit_group(self, trains: list[LabeledImages], ctxs: list[FitContext]) -> list[ServedModel] | None:
        """Train one model per (training set, context) in one go, each exactly as :meth:`fit` would
        up to float rounding (own seed, data order, membership); None where this recipe cannot be
        grouped (the runner then calls :meth:`fit` per model). Default: None."""
        return None
