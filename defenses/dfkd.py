"""Data-free knowledge distillation (DFKD), the misleading-evaluations paper's fifth case study
(Aerni, Zhang, Tramer, CCS 2024, table 1; protocol notes section 4.5; the synthesis follows
DeepInversion, Yin et al. 2020, with a persistent generator as in Fang et al.'s fast DFKD).

The claim under test: the served student never sees a real training image, so it should not leak
membership. It is distilled from the undefended model (the teacher) on images synthesized from the
teacher alone, and yet inherits the teacher's memorization of its mislabeled canaries.

1. **Teacher**: the undefended recipe (``train.*``, the model's seed) on the model's training set,
   or the same model read from an undefended run saved with ``--save-models``
   (:mod:`harness.run.teachers`; ``defense_params.teacher_run`` names it, else one is looked up under
   ``run.out``). Its architecture must have BatchNorm layers (``mlp-bn``, ``cnn``, ``wrn16-4``).
2. **Synthesis**, every round: a fresh latent batch z ~ N(0, I) (``synth_batch`` x ``latent_dim``)
   and a new Adam optimizer (generator lr ``generator_lr``, z lr ``z_lr``, betas (0.5, 0.999)).
   ``synth_steps`` iterations of: x = G(z) in [0, 1]; one random crop (zero padding of the
   dataset's shift, 4 px at 32 px, 1 px for digits) and flip (where the dataset allows flips) shared
   by the batch; normalization; the teacher in eval mode; the DeepInversion loss
   ``sum_l ||running_var_l - v_l||_2 + ||running_mean_l - m_l||_2`` over the teacher's BatchNorm
   layers, with (m_l, v_l) the batch mean and biased variance of the layer's input, blended with an
   EMA of earlier rounds' statistics: ``(1 - 0.9) cur + 0.9 ema`` from the second round on
   (``bn_momentum``; the EMA takes the statistics of each round's last iteration). The lowest-loss x
   of the round (before its step) is kept as uint8 ``floor(clamp(x, 0, 1) 255)`` in a memory bank
   that grows by ``synth_batch`` images per round. The generator (:class:`Generator`) persists.
3. **Student** (the teacher's architecture, its own initialization): from round ``warmup`` on,
   ``student_passes`` passes per round over the whole bank (batches of ``student_batch_size``,
   reshuffled, per-image random crop and flip where the dataset allows) with the loss
   ``KL(softmax(t / T) || softmax(s / T)) T^2`` (batch mean; :func:`kd_loss`), teacher logits on the
   same augmented batch. SGD (``student_lr``, ``student_momentum``, ``student_weight_decay``) with a
   cosine decay from ``student_lr`` to ``student_lr_min`` over the student rounds, one value per
   round. The final student is the served model.

Differences from the paper's code, on purpose (docs/protocol.md):

- the generator is sized to the dataset's images (``Linear(nz, 128 (H/4)(W/4))``; the paper's is
  for 32 x 32 x 3 only), and the synthesis crop's padding is the dataset's shift (1 px for digits);
- the student's cosine schedule spans exactly its rounds (the paper's ``CosineAnnealingLR(T_max=200)``
  is stepped 220 times, so its learning rate rises again over the last 20 epochs);
- the student is augmented with the dataset's own augmentation (no flips for digits);
- the paper evaluates the final student as here (its best-on-test checkpoint is overwritten).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from defenses.base import (Defense, FitContext, LabeledImages, Normalizer, ServedModel, TorchClassifier, is_int,
                           is_number)
from defenses.training import init_network, seeded_init, train_classifier
from harness.core.data import AugmentSpec
from harness.core.lazy import LazyModule

if TYPE_CHECKING:
    from defenses.generators import Generator

# torch where a model trains: naming the defense (the attack phase, the reports) needs none
torch = LazyModule("torch")
F = LazyModule("torch.nn.functional")
nn = LazyModule("torch.nn")


def __getattr__(name: str) -> Any:
    if name == "Generator":  # defined with torch, in defenses.generators
        from defenses.generators import Generator

        return Generator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Stream tags of the seeds derived from the model seed (SeedSequence([seed, tag])); the teacher
# uses the model seed itself, so that it is the undefended model of the same index.
_GENERATOR, _SYNTHESIS, _STUDENT_INIT, _STUDENT_ORDER = 1, 2, 3, 4


def derived_seed(seed: int, tag: int) -> int:
    return int(np.random.SeedSequence([seed, 0xDF, tag]).generate_state(1)[0])


def batchnorm_layers(net: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


class BNStatistics:
    """DeepInversion's feature-statistics loss on a network's BatchNorm layers (forward hooks).

    While ``active``, every forward records each BN layer's input batch mean and biased variance
    (per channel). :meth:`loss` is ``sum_l ||running_var_l - v_l||_2 + ||running_mean_l - m_l||_2``
    with ``(m_l, v_l)`` the recorded statistics, blended with the EMA kept by :meth:`update_ema`
    (``(1 - momentum) cur + momentum ema``) once there is one.
    """

    def __init__(self, net: nn.Module, momentum: float) -> None:
        self.layers = batchnorm_layers(net)
        self.momentum = momentum
        self.active = True
        self.current: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.layers)
        self.ema: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.handles = [m.register_forward_hook(self._hook(i)) for i, m in enumerate(self.layers)]

    def _hook(self, i: int) -> Callable[..., None]:
        def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if self.active:
                x = inputs[0]
                dims = [0, *range(2, x.dim())]
                self.current[i] = (x.mean(dim=dims), x.var(dim=dims, correction=0))
        return record

    def blended(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (mean, var) as the loss compares them: the current batch's, blended with the EMA."""
        if any(c is None for c in self.current):
            raise RuntimeError("no forward pass recorded on every BatchNorm layer")
        cur = [c for c in self.current if c is not None]
        if self.ema is None:
            return cur
        m = self.momentum
        return [((1 - m) * mc + m * me, (1 - m) * vc + m * ve) for (mc, vc), (me, ve) in zip(cur, self.ema)]

    def loss(self) -> torch.Tensor:
        terms = [torch.linalg.vector_norm(layer.running_var - v) + torch.linalg.vector_norm(layer.running_mean - mu)
                 for layer, (mu, v) in zip(self.layers, self.blended())]
        return torch.stack(terms).sum()

    def loss_after(self, logits: torch.Tensor, targets: torch.Tensor, ce_weight: float) -> torch.Tensor:
        """:meth:`loss` (of the forward pass that gave ``logits``) plus ``ce_weight`` times the
        cross-entropy of ``logits`` on ``targets`` (DeepInversion's class-conditional term)."""
        out = self.loss()
        return out + ce_weight * F.cross_entropy(logits, targets) if ce_weight else out

    def update_ema(self) -> None:
        """Fold the last recorded statistics into the EMA (the first call sets it)."""
        with torch.no_grad():
            cur = [(mu.detach(), v.detach()) for mu, v in self.current]  # type: ignore[misc]
            if self.ema is None:
                self.ema = cur
            else:
                m = self.momentum
                self.ema = [(m * me + (1 - m) * mc, m * ve + (1 - m) * vc)
                            for (me, ve), (mc, vc) in zip(self.ema, cur)]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``KL(softmax(t / T) || softmax(s / T)) T^2``, summed over classes and averaged over the batch."""
    t = float(temperature)
    log_q = F.log_softmax(student_logits / t, dim=1)
    p = F.softmax(teacher_logits / t, dim=1)
    return F.kl_div(log_q, p, reduction="batchmean") * (t * t)


def shared_view(x: torch.Tensor, spec: AugmentSpec, gen: torch.Generator) -> torch.Tensor:
    """One random crop (zero padding of ``spec.shift`` pixels) and, if ``spec.flip``, one random
    horizontal flip, the same for the whole batch (x float in [0, 1]); differentiable in x."""
    s = spec.shift
    if s:
        h, w = x.shape[-2:]
        oy, ox = (int(v) for v in torch.randint(0, 2 * s + 1, (2,), generator=gen))
        x = F.pad(x, (s, s, s, s))[..., oy : oy + h, ox : ox + w]
    if spec.flip and float(torch.rand(1, generator=gen)) < 0.5:
        x = torch.flip(x, dims=(-1,))
    return x


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """``floor(clamp(x, 0, 1) 255)`` as uint8 (the bank's storage)."""
    return torch.floor(x.detach().clamp(0, 1) * 255).to(torch.uint8)


@dataclass(frozen=True)
class DFKDFit:
    """Everything one DFKD fit produced: the teacher, the generator, the bank (uint8, (N, C, H, W)),
    the per-round synthesis losses (the kept image's) and the served student."""

    teacher: nn.Module
    generator: Generator | None  # None in feature space
    bank: np.ndarray  # uint8 images, or float32 features in feature space
    synth_losses: list[float]
    student: TorchClassifier




def synthetic_distance_ratio(synthetic: torch.Tensor, real: torch.Tensor, seed: int, sample: int = 500) -> float:
    """The median, over up to ``sample`` synthetic features, of the distance to the nearest real
    feature, over the median distance from a held-out half of the real features (up to ``sample``)
    to the nearest of the other half: 1 where synthetic features sit as close to real ones as real
    ones to each other, far above it where they lie off the transform's range."""
    gen = torch.Generator().manual_seed(seed)
    r = real.flatten(1).float()
    perm = torch.randperm(len(r), generator=gen).to(r.device)
    held, ref = r[perm[: len(r) // 2]][:sample], r[perm[len(r) // 2:]]
    s = synthetic.flatten(1).float()
    s = s[torch.randperm(len(s), generator=gen).to(s.device)[:sample]]
    d_syn = torch.cdist(s, ref).min(1).values.median()
    d_real = torch.cdist(held, ref).min(1).values.median()
    return float(d_syn / d_real) if float(d_real) > 0 else math.inf


class DFKD(Defense):
    """Data-free knowledge distillation: a student distilled on images synthesized from the
    undefended teacher's BatchNorm statistics (module docstring)."""

    name = "dfkd"
    description = "data-free distillation: the student learns from images synthesized from the undefended teacher"
    reference = "https://arxiv.org/abs/1912.08795"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)
    reuses_undefended = True
    plumbing_params = frozenset({"teacher_run"})
    train_fields: ClassVar[frozenset[str] | None] = None  # the whole recipe trains the teacher
    recipe_note = ("the train.* recipe trains the teacher (the undefended model); the synthesis and the student have "
                   "their own defense_params (rounds, synth_*, student_*)")
    param_defaults: ClassVar[dict[str, Any]] = {
        "rounds": 240,
        "warmup": 20,
        "synth_batch": 256,
        "latent_dim": 256,
        "generator_lr": 5e-3,
        "z_lr": 0.015,
        "synth_steps": 2,
        "bn_momentum": 0.9,
        "temperature": 20.0,
        "student_passes": 5,
        "student_lr": 0.1,
        "student_lr_min": 2e-4,
        "student_momentum": 0.9,
        "student_weight_decay": 5e-4,
        "student_batch_size": 256,
        "teacher_run": None,
        # feature space (a teacher on fixed features, e.g. cifar10-scatter's scatter-linear-bn): the synthesized
        # features' Adam learning rate, the weight of the teacher's cross-entropy on random target classes, and
        # the student's architecture (None: the teacher's)
        "feature_lr": 0.05,
        "ce_weight": 1.0,
        "student_model": None,
    }
    #: the generator's parameters, which the feature-space synthesis has no use for (refused there when set)
    GENERATOR_PARAMS: ClassVar[tuple[str, ...]] = ("latent_dim", "generator_lr", "z_lr")
    #: the feature-space parameters, which the image synthesis has no use for
    FEATURE_PARAMS: ClassVar[tuple[str, ...]] = ("feature_lr", "ce_weight", "student_model")

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        for k in ("rounds", "synth_batch", "latent_dim", "synth_steps", "student_passes", "student_batch_size"):
            if not is_int(p[k]) or p[k] < 1:
                raise ValueError(f"{k} must be a positive integer, got {p[k]!r}")
        if not is_int(p["warmup"]) or not 0 <= p["warmup"] < p["rounds"]:
            raise ValueError(f"warmup must be an integer with 0 <= warmup < rounds ({p['rounds']}): the student "
                             f"trains from round warmup on, got {p['warmup']!r}")
        for k in ("generator_lr", "z_lr", "temperature", "student_lr"):
            if not is_number(p[k]) or not p[k] > 0:
                raise ValueError(f"{k} must be a positive number, got {p[k]!r}")
        if not is_number(p["student_lr_min"]) or not 0 <= p["student_lr_min"] <= p["student_lr"]:
            raise ValueError(f"student_lr_min must be a number in [0, student_lr], got {p['student_lr_min']!r}")
        for k in ("bn_momentum", "student_momentum"):
            if not is_number(p[k]) or not 0 <= p[k] < 1:
                raise ValueError(f"{k} must be a number in [0, 1), got {p[k]!r}")
        if not is_number(p["student_weight_decay"]) or p["student_weight_decay"] < 0:
            raise ValueError(f"student_weight_decay must be a number >= 0, got {p['student_weight_decay']!r}")
        if p["teacher_run"] is not None and not (isinstance(p["teacher_run"], str) and p["teacher_run"]):
            raise ValueError(f"teacher_run must be the path of an undefended run directory, got {p['teacher_run']!r}")
        if not is_number(p["feature_lr"]) or not p["feature_lr"] > 0:
            raise ValueError(f"feature_lr must be a positive number, got {p['feature_lr']!r}")
        if not is_number(p["ce_weight"]) or p["ce_weight"] < 0:
            raise ValueError(f"ce_weight must be a number >= 0, got {p['ce_weight']!r}")
        from harness.core.config import MODEL_KINDS

        if p["student_model"] is not None and p["student_model"] not in MODEL_KINDS:
            raise ValueError(f"student_model must be one of {', '.join(MODEL_KINDS)} or null (the teacher's), got "
                             f"{p['student_model']!r}")

    def check_config(self, cfg: Any) -> None:
        """The synthesis matches the teacher's BatchNorm statistics: the teacher needs BN layers. On fixed
        features (``scatter-*``) the synthesis is in feature space: the generator's parameters are not
        read, so setting them is refused, as are the feature-space ones for an image teacher."""
        from harness.core.config import BATCHNORM_KINDS

        if cfg.train.model not in BATCHNORM_KINDS:
            raise ValueError(f"DFKD's teacher (train.model) needs BatchNorm layers: {', '.join(BATCHNORM_KINDS)}; "
                             f"got train.model={cfg.train.model}")
        features = str(cfg.train.model).startswith("scatter-")
        unread = self.GENERATOR_PARAMS if features else self.FEATURE_PARAMS
        changed = [k for k in unread if self.params[k] != self.param_defaults[k]]
        if changed:
            where = ("the synthesis is in feature space (a teacher on fixed features) and has no generator"
                     if features else "the synthesis makes images with a generator")
            raise ValueError(f"{', '.join(changed)} {'is' if len(changed) == 1 else 'are'} not read here: {where}")
        student = self.params["student_model"]
        if student is not None and str(student).startswith("scatter-") != features:
            raise ValueError(f"student_model {student} must take the teacher's inputs (train.model {cfg.train.model})")

    # --- parts -------------------------------------------------------------------------------
    def make_student(self, image_shape: tuple[int, ...], num_classes: int, ctx: FitContext) -> nn.Module:
        """The student: ``student_model`` or the teacher's architecture (``train.model``, ``train.width``),
        its own init."""
        from defenses.models import build_model

        kind = self.params["student_model"] or ctx.train.model
        return seeded_init(lambda: build_model(kind, tuple(image_shape), num_classes, ctx.train.width),
                           derived_seed(ctx.seed, _STUDENT_INIT))

    def student_lr(self, student_round: int) -> float:
        """The learning rate of student round t (0-based): cosine from ``student_lr`` to ``student_lr_min``."""
        p = self.params
        total = p["rounds"] - p["warmup"]
        lo, hi = float(p["student_lr_min"]), float(p["student_lr"])
        return lo + (hi - lo) * 0.5 * (1 + math.cos(math.pi * student_round / total))

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        return self.fit_all(train, ctx).student

    def fit_all(self, train: LabeledImages, ctx: FitContext) -> DFKDFit:
        """Teacher (trained or reused), then ``rounds`` rounds of synthesis and student updates.

        Deterministic from ``ctx.seed``: the teacher uses it as the undefended model does; the
        generator's initialization, the latent and crop draws, the student's initialization and its
        batch order and augmentation use separate derived streams. Progress: one fraction over the
        teacher's and the rounds' work (sample passes)."""
        from defenses.generators import Generator

        p = self.params
        device = torch.device(ctx.device)
        shape = tuple(int(v) for v in train.x.shape[1:])
        rounds, warmup, batch = int(p["rounds"]), int(p["warmup"]), int(p["synth_batch"])
        passes = int(p["student_passes"])
        Generator(int(p["latent_dim"]), shape)  # refuses image sides the generator cannot produce, before training

        # progress weights: teacher epochs x samples, then per round the synthesis and the student passes
        reused = ctx.undefended is not None
        teacher_work = 0.0 if reused else float(ctx.train.epochs * len(train))
        round_work = [4.0 * p["synth_steps"] * batch + (passes * batch * (r + 1) if r >= warmup else 0)
                      for r in range(rounds)]
        done = np.cumsum([teacher_work, *round_work]) / max(1e-12, teacher_work + sum(round_work))

        if reused:
            teacher = ctx.undefended.net.to(device)
            source = ctx.undefended.source
        else:
            tctx = FitContext(seed=ctx.seed, device=ctx.device, train=ctx.train, params=ctx.params,
                              progress=lambda what, f: ctx.report("teacher", f * float(done[0])))
            teacher = train_classifier(init_network(train, ctx), train, tctx)
            source = None
        teacher.eval()
        for q in teacher.parameters():
            q.requires_grad_(False)
        if not batchnorm_layers(teacher):
            raise ValueError("DFKD's teacher has no BatchNorm layers: use train.model mlp-bn, cnn or wrn16-4")
        from defenses.scatter_models import fixed_features

        if fixed_features(teacher) is not None:
            return self._fit_features(train, ctx, teacher, source, done)

        mean = torch.tensor(train.mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        std = torch.tensor(train.std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        normalize = Normalizer(train.mean, train.std, device)
        generator = seeded_init(lambda: Generator(int(p["latent_dim"]), shape),
                                derived_seed(ctx.seed, _GENERATOR)).to(device).train()
        synth_gen = torch.Generator().manual_seed(derived_seed(ctx.seed, _SYNTHESIS))
        student = self.make_student(shape, train.num_classes, ctx).to(device).train()
        opt_s = torch.optim.SGD(student.parameters(), lr=float(p["student_lr"]), momentum=float(p["student_momentum"]),
                                weight_decay=float(p["student_weight_decay"]))
        order_gen = torch.Generator().manual_seed(derived_seed(ctx.seed, _STUDENT_ORDER))
        stats = BNStatistics(teacher, float(p["bn_momentum"]))
        bank: list[torch.Tensor] = []
        losses: list[float] = []
        try:
            for r in range(rounds):
                # --- synthesis: a fresh z and optimizer, the generator persists ---------------------
                stats.active = True
                z = torch.randn(batch, int(p["latent_dim"]), generator=synth_gen).to(device).requires_grad_(True)
                opt_g = torch.optim.Adam([{"params": generator.parameters()},
                                          {"params": [z], "lr": float(p["z_lr"])}],
                                         lr=float(p["generator_lr"]), betas=(0.5, 0.999))
                best_loss, best_x = math.inf, None
                for _ in range(int(p["synth_steps"])):
                    x = generator(z)
                    teacher((shared_view(x, train.augment, synth_gen) - mean) / std)
                    loss = stats.loss()
                    value = float(loss.detach())
                    if value < best_loss:
                        best_loss, best_x = value, x.detach().clone()
                    opt_g.zero_grad(set_to_none=True)
                    loss.backward()
                    opt_g.step()
                stats.update_ema()
                stats.active = False
                if not math.isfinite(best_loss):
                    raise RuntimeError(f"DFKD synthesis diverged (loss {best_loss}) in round {r}; lower generator_lr")
                bank.append(to_uint8(best_x))
                losses.append(best_loss)
                # --- student: passes over the whole bank ------------------------------------------
                if r >= warmup:
                    lr = self.student_lr(r - warmup)
                    for g in opt_s.param_groups:
                        g["lr"] = lr
                    self._student_round(student, teacher, opt_s, torch.cat(bank), train.augment, normalize,
                                        order_gen, passes)
                ctx.report("distill", float(done[r + 1]))
        finally:
            stats.remove()
        student.eval()
        bank_x = torch.cat(bank)
        hits = 0
        with torch.no_grad():
            for i in range(0, len(bank_x), 1024):
                xb = normalize(bank_x[i : i + 1024])
                hits += int((student(xb).argmax(1) == teacher(xb).argmax(1)).sum())
        agree = hits / len(bank_x)
        record = {
            "teacher": "reused" if reused else "trained",
            "teacher_source": source,
            "teacher_bn_layers": len(stats.layers),
            "bank_size": int(len(bank_x)),
            "rounds": rounds,
            "student_rounds": rounds - warmup,
            "first_synth_loss": losses[0],
            "final_synth_loss": losses[-1],
            "student_teacher_agreement_on_bank": agree,
        }
        served = TorchClassifier(student, train.mean, train.std, ctx.device, record=record)
        return DFKDFit(teacher=teacher, generator=generator, bank=bank_x.cpu().numpy(), synth_losses=losses,
                       student=served)

    def _fit_features(self, train: LabeledImages, ctx: FitContext, teacher: nn.Module, source: str | None,
                      done: np.ndarray) -> DFKDFit:
        """DFKD on fixed features (:mod:`defenses.scatter_models`: the teacher is ``head(features(x))``
        with BatchNorm in its head). Every round: ``synth_batch`` features drawn N(0, 1) in the feature
        map's shape, with random target classes, optimized for ``synth_steps`` Adam steps (``feature_lr``)
        on DeepInversion's BatchNorm-statistics loss over the teacher head's BN layers (blended with its
        EMA as in image space) plus ``ce_weight`` times the teacher's cross-entropy on the targets; the
        last step's features join the bank. The student head (``student_model``, e.g. ``scatter-linear``)
        learns from round ``warmup`` on from the bank alone, with the KD loss against the teacher head's
        outputs, as in image space (no augmentation: features have none). It never sees a real feature.
        Served on images: the same fixed map, then the student head.

        The caveat this setting carries: synthesized features need not be features of any image (the map
        is not onto). Recorded, not used in training: each synthetic feature's distance to its nearest
        real training feature, over the real features' own nearest-neighbour distance (a held-out half
        against the other half), as the median ratio (``synthetic_to_real_distance``; 1: as close as real
        features are to one another)."""
        from defenses.scatter_models import FeatureNet, fixed_features

        p = self.params
        device = torch.device(ctx.device)
        head = fixed_features(teacher).head
        normalize = Normalizer(train.mean, train.std, device)
        with torch.no_grad():
            real = torch.cat([teacher.features(normalize(torch.from_numpy(train.x[i: i + 512]).to(device)))
                              for i in range(0, len(train.x), 512)])
        shape = tuple(real.shape[1:])
        rounds, warmup, batch = int(p["rounds"]), int(p["warmup"]), int(p["synth_batch"])
        synth_gen = torch.Generator().manual_seed(derived_seed(ctx.seed, _SYNTHESIS))
        student_net = self.make_student(tuple(train.x.shape[1:]), train.num_classes, ctx)
        student = fixed_features(student_net)
        if student is None:
            raise ValueError(f"student_model {p['student_model']} does not read the teacher's fixed features")
        s_head = student.head.to(device).train()
        opt_s = torch.optim.SGD(s_head.parameters(), lr=float(p["student_lr"]), momentum=float(p["student_momentum"]),
                                weight_decay=float(p["student_weight_decay"]))
        order_gen = torch.Generator().manual_seed(derived_seed(ctx.seed, _STUDENT_ORDER))
        stats = BNStatistics(head, float(p["bn_momentum"]))
        bank: list[torch.Tensor] = []
        losses: list[float] = []
        t = float(p["temperature"])
        try:
            for r in range(rounds):
                stats.active = True
                f = torch.randn((batch, *shape), generator=synth_gen).to(device).requires_grad_(True)
                y = torch.randint(0, train.num_classes, (batch,), generator=synth_gen).to(device)
                opt_f = torch.optim.Adam([f], lr=float(p["feature_lr"]), betas=(0.5, 0.999))
                for _ in range(int(p["synth_steps"])):
                    loss = stats.loss_after(head(f), y, float(p["ce_weight"]))
                    opt_f.zero_grad(set_to_none=True)
                    loss.backward()
                    opt_f.step()
                with torch.no_grad():
                    final = stats.loss_after(head(f), y, float(p["ce_weight"]))
                stats.update_ema()
                stats.active = False
                value = float(final)
                if not math.isfinite(value):
                    raise RuntimeError(f"DFKD feature synthesis diverged (loss {value}) in round {r}; lower feature_lr")
                bank.append(f.detach())
                losses.append(value)
                if r >= warmup:
                    lr = self.student_lr(r - warmup)
                    for g in opt_s.param_groups:
                        g["lr"] = lr
                    feats = torch.cat(bank)
                    for _ in range(int(p["student_passes"])):
                        perm = torch.randperm(len(feats), generator=order_gen).to(device)
                        for i in range(0, len(feats), int(p["student_batch_size"])):
                            fb = feats[perm[i: i + int(p["student_batch_size"])]]
                            with torch.no_grad():
                                t_logits = head(fb)
                            loss = kd_loss(s_head(fb), t_logits, t)
                            opt_s.zero_grad(set_to_none=True)
                            loss.backward()
                            opt_s.step()
                ctx.report("distill", float(done[r + 1]))
        finally:
            stats.remove()
        s_head.eval()
        feats = torch.cat(bank)
        with torch.no_grad():
            agree = float((s_head(feats).argmax(1) == head(feats).argmax(1)).float().mean())
        record = {
            "teacher": "trained" if source is None else "reused", "teacher_source": source, "space": "features",
            "teacher_bn_layers": len(stats.layers), "bank_size": int(len(feats)), "rounds": rounds,
            "student_rounds": rounds - warmup, "first_synth_loss": losses[0], "final_synth_loss": losses[-1],
            "student_teacher_agreement_on_bank": agree,
            "synthetic_to_real_distance": synthetic_distance_ratio(feats, real, derived_seed(ctx.seed, _SYNTHESIS)),
        }
        served = TorchClassifier(FeatureNet(s_head), train.mean, train.std, ctx.device, record=record)
        return DFKDFit(teacher=teacher, generator=None, bank=feats.cpu().numpy(), synth_losses=losses, student=served)

    def _student_round(self, student: nn.Module, teacher: nn.Module, opt: torch.optim.Optimizer, bank: torch.Tensor,
                       spec: AugmentSpec, normalize: Normalizer, gen: torch.Generator, passes: int) -> None:
        """``passes`` shuffled passes over the bank: per-image crop/flip, KD loss against the teacher."""
        from harness.core.augment import random_augment

        n, b, t = len(bank), int(self.params["student_batch_size"]), float(self.params["temperature"])
        student.train()
        for _ in range(passes):
            perm = torch.randperm(n, generator=gen).to(bank.device)
            for i in range(0, n, b):
                xb = normalize(random_augment(bank[perm[i : i + b]], spec, gen))
                with torch.no_grad():
                    t_logits = teacher(xb)
                loss = kd_loss(student(xb), t_logits, t)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
