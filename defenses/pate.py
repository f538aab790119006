"""PATE-FM: PATE with FixMatch teachers and student, the label-DP antipode of ALIBI (Malek, Mironov,
Prasad, Shilov, Tramer, "Antipodes of Label Differential Privacy: PATE and ALIBI", NeurIPS 2021,
its Table 3; aggregation and accounting from Papernot et al., "Scalable Private Learning
with PATE", ICLR 2018; facts in ``../shared/reference/labeldp-notes.md`` and docs/defenses.md).

Label-DP protects the labels only; the images are public. So the **unlabeled pool** is the
training set's own images, without their labels, and the student's queries are drawn from it (as
the authors' code does: its student set is a seeded random subset of the CIFAR training images).

1. **Partition.** The private labeled training set is split into ``num_teachers`` disjoint
   partitions of (almost) equal size, a seeded random permutation dealt out in turn.
2. **Teachers.** Teacher k trains with FixMatch (:mod:`defenses.fixmatch`) on the labeled examples
   of partition k and the unlabeled pool; it never sees another partition's labels.
3. **Confident-GNMax** (Papernot et al. 2018, Algorithm 1). The query pool is a seeded random
   order of at most ``query_pool`` training images. Query by query, in that order, each teacher
   votes the argmax of its logits; the query is answered when ``max_j n_j + N(0, sigma1^2) >=
   threshold``, and then labelled ``argmax_j (n_j + N(0, sigma2^2))``. Asking stops once
   ``queries`` queries are answered (or the pool is exhausted: recorded).
4. **Student.** A fresh network trains with FixMatch on the answered queries with their released
   labels and the unlabeled pool; it is the served model. It sees private labels only through the
   released answers: :func:`train_student` receives nothing else.
5. **Accounting** (:mod:`defenses.pate_accounting`): the data-independent RDP bound (selection on
   every query asked, release on every answered one), converted to (eps, delta) at ``delta``: the
   label epsilon. Beside it, the data-dependent bound of Papernot et al.'s Theorem 6 on this run's
   votes, labelled as what it is: not a guarantee one may publish (the paper publishes it through
   smooth sensitivity, not implemented here).

Deviations from the authors' code, on purpose: each teacher casts one vote (the argmax; their code
gives a tied teacher a vote for every tied class, which can move two votes); the selection noise is
added to the top vote only (Papernot et al.'s Algorithm 1, which the accounting assumes; their code
adds N(0, sigma1^2) to every class and thresholds the noisy maximum); no exponential moving average
of the weights (:mod:`defenses.fixmatch`); the served model is the last one, not the one with the
best test accuracy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np
from defenses.base import Defense, FitContext, LabeledImages, ServedModel, TorchClassifier, is_int
from defenses.pate_accounting import account

if TYPE_CHECKING:  # torch and FixMatch load when a model trains, not when the defense is named
    from torch import nn

    from defenses.fixmatch_recipe import FixMatchRecipe

# Stream tags of the seeds derived from the model seed (SeedSequence([seed, tag, ...])).
_PARTITION, _TEACHER_INIT, _TEACHER_TRAIN, _QUERIES, _NOISE, _STUDENT_INIT, _STUDENT_TRAIN = range(7)
#: teachers trained side by side in one FixMatch loop: all of them (up to 50) for the plain MLP,
#: which trains as one batched network; one at a time for the others (memory)
TEACHER_GROUP = {"mlp": 50}


def derived_seed(seed: int, *tags: int) -> int:
    """A 32-bit seed for one stream of model ``seed``."""
    return int(np.random.SeedSequence([seed, *tags]).generate_state(1)[0])


def partition(n: int, num_teachers: int, rng: np.random.Generator) -> np.ndarray:
    """(n,) teacher index of each training example: a random permutation dealt out in turn, so the
    partitions are disjoint, cover every example and differ in size by at most one."""
    if not 1 <= num_teachers <= n:
        raise ValueError(f"need 1 <= num_teachers <= {n} labeled examples, got {num_teachers}")
    owner = np.empty(n, dtype=np.int64)
    owner[rng.permutation(n)] = np.arange(n) % num_teachers
    return owner


@dataclass(frozen=True)
class GNMaxAnswers:
    """The outcome of Confident-GNMax over a query order: ``asked`` queries were asked (a prefix),
    ``answered`` (asked,) says which were answered, ``labels`` are the released labels of the
    answered ones, in query order."""

    asked: int
    answered: np.ndarray
    labels: np.ndarray

    @property
    def answered_positions(self) -> np.ndarray:
        return np.flatnonzero(self.answered)


def confident_gnmax(votes: np.ndarray, threshold: float, sigma1: float, sigma2: float, max_answers: int,
                    rng: np.random.Generator) -> GNMaxAnswers:
    """Papernot et al.'s Confident-GNMax over ``votes`` (Q, classes), query by query in order, until
    ``max_answers`` are answered: query i is answered iff ``max(votes[i]) + N(0, sigma1^2) >= threshold``
    and released as ``argmax(votes[i] + N(0, sigma2^2 I))``. The noise is drawn for the whole order
    up front (``rng.normal(0, sigma1, Q)``, then ``rng.normal(0, sigma2, (Q, classes))``); the draws
    of queries never asked are never used."""
    if not sigma1 > 0 or not sigma2 > 0:
        raise ValueError(f"sigma1 and sigma2 must be positive, got {sigma1}, {sigma2}")
    votes = np.asarray(votes, dtype=np.float64)
    q = len(votes)
    sel = rng.normal(0.0, sigma1, size=q)
    rel = rng.normal(0.0, sigma2, size=votes.shape)
    passed = votes.max(axis=1) + sel >= threshold
    cum = np.cumsum(passed)
    asked = q if q == 0 or cum[-1] < max_answers else int(np.searchsorted(cum, max_answers)) + 1
    answered = passed[:asked]
    labels = np.argmax(votes[:asked][answered] + rel[:asked][answered], axis=1).astype(np.int64)
    return GNMaxAnswers(asked=asked, answered=answered, labels=labels)


def teacher_votes(teachers: list[nn.Module], x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...],
                  device: str, num_classes: int) -> np.ndarray:
    """(len(x), classes) vote histograms: each teacher votes the argmax of its logits on the
    un-augmented image."""
    votes = np.zeros((len(x), num_classes), dtype=np.int64)
    for t in teachers:
        pred = TorchClassifier(t, mean, std, device).query(x).argmax(axis=1)
        votes[np.arange(len(x)), pred] += 1
    return votes


def train_student(net: nn.Module, query_x: np.ndarray, released: np.ndarray, pool_x: np.ndarray,
                  recipe: FixMatchRecipe, train: LabeledImages, seed: int, device: str,
                  progress: Callable[[float], None] | None = None) -> nn.Module:
    """The student: FixMatch on the answered query images ``query_x`` with their released labels and
    the unlabeled pool. ``train`` gives only the normalization and augmentation (its labels are not
    read)."""
    from defenses.fixmatch import train_fixmatch

    return train_fixmatch([net], [query_x], [released], pool_x, recipe=recipe, augment=train.augment,
                          mean=train.mean, std=train.std, seed=seed, device=device, progress=progress)[0]


@dataclass(frozen=True)
class PATEFMFit:
    """Everything one PATE-FM fit produced (tests and diagnostics read it; the harness serves ``student``)."""

    owner: np.ndarray            # (n,) teacher of each training example
    teachers: list[nn.Module]
    query_order: np.ndarray      # (Q,) training indices, the query pool in query order
    votes: np.ndarray            # (Q, classes)
    answers: GNMaxAnswers
    student: TorchClassifier


class PATEFM(Defense):
    """PATE-FM (module doc). Parameters: the mechanism (``num_teachers``, ``sigma1``, ``sigma2``,
    ``threshold``, ``queries`` answered, ``query_pool``, ``delta``) and FixMatch's (``teacher_steps``,
    ``student_steps``, ``batch_size``, ``mu``, ``lr``, ``momentum``, ``weight_decay``, ``confidence``
    (tau), ``lambda_u``, ``cutout``). Defaults: the seed's CIFAR-10 high-utility row of Table 3
    (200 teachers, sigma1 160, sigma2 20, T 100, 500 answered) and the authors' FixMatch schedule."""

    name = "pate-fm"
    description = ("label-DP (labels only): PATE-FM, FixMatch teachers on disjoint label partitions, "
                   "Confident-GNMax answers, FixMatch student")
    reference = "https://arxiv.org/abs/2106.03408"
    default_canary = "mislabeled"
    adaptive_attacks = ("lira",)
    train_fields = frozenset({"model", "width"})
    recipe_note = ("PATE-FM trains its teachers and student with FixMatch on its own schedule (defense_params: "
                   "teacher_steps, student_steps, batch_size, lr, ...)")
    param_defaults: ClassVar[dict[str, Any]] = {
        "num_teachers": 200, "sigma1": 160.0, "sigma2": 20.0, "threshold": 100.0, "queries": 500,
        "query_pool": 10000, "delta": 1e-5, "teacher_width": None,
        # FixMatch: the authors' schedule (40 and 200 epochs of 781 steps), Sohn et al.'s hyperparameters
        "teacher_steps": 31240, "student_steps": 156200, "batch_size": 64, "mu": 7, "lr": 0.03, "momentum": 0.9,
        "weight_decay": 0.0005, "confidence": 0.95, "lambda_u": 1.0, "cutout": 0.5,
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        p = self.params
        for key in ("sigma1", "sigma2"):
            if not p[key] > 0:
                raise ValueError(f"{key} must be positive (the Gaussian noise of Confident-GNMax), got {p[key]!r}")
        if not p["threshold"] >= 0:
            raise ValueError(f"threshold must be >= 0 (votes needed to answer a query), got {p['threshold']!r}")
        if p["num_teachers"] < 1:
            raise ValueError(f"num_teachers must be >= 1, got {p['num_teachers']!r}")
        if p["queries"] < 1:
            raise ValueError(f"queries (answered queries) must be >= 1, got {p['queries']!r}: "
                             "a student needs at least one answered query")
        if p["query_pool"] < p["queries"]:
            raise ValueError(f"query_pool ({p['query_pool']}) must be at least queries ({p['queries']}): "
                             "no more queries can be answered than are asked")
        tw = p["teacher_width"]
        if tw is not None and (not is_int(tw) or tw < 1):
            raise ValueError(f"teacher_width must be null (the preset's train.width) or a positive integer, got {tw!r}")
        if not 0 < p["delta"] < 1:
            raise ValueError(f"delta must be in (0, 1), got {p['delta']!r}")
        for key in ("teacher_steps", "student_steps"):  # named here: the recipe knows them only as "steps"
            if p[key] < 1:
                raise ValueError(f"{key} must be a positive integer (FixMatch steps), got {p[key]!r}")
        self.teacher_recipe()  # FixMatch's own checks (batch size, mu, tau, ...)
        self.student_recipe()

    def teacher_recipe(self) -> FixMatchRecipe:
        return self._recipe(int(self.params["teacher_steps"]))

    def student_recipe(self) -> FixMatchRecipe:
        return self._recipe(int(self.params["student_steps"]))

    def _recipe(self, steps: int) -> FixMatchRecipe:
        from defenses.fixmatch_recipe import FixMatchRecipe

        p = self.params  # its ValueError names the parameter; the caller adds "defense_params: "
        return FixMatchRecipe(steps=steps, batch_size=int(p["batch_size"]), mu=int(p["mu"]), lr=float(p["lr"]),
                              momentum=float(p["momentum"]), weight_decay=float(p["weight_decay"]),
                              confidence=float(p["confidence"]), lambda_u=float(p["lambda_u"]),
                              cutout=float(p["cutout"]))

    def check_train_size(self, smallest: int) -> None:
        t, q = int(self.params["num_teachers"]), int(self.params["queries"])
        if t > smallest:
            raise ValueError(f"num_teachers ({t}) is larger than the labeled training set ({smallest} examples): "
                             "every teacher needs at least one labeled example")
        if q > smallest:
            raise ValueError(f"queries ({q}) is larger than the query pool ({smallest} training images): no more "
                             "queries can be answered than there are images to ask about")

    def fit(self, train: LabeledImages, ctx: FitContext) -> ServedModel:
        return self.fit_all(train, ctx).student

    def fit_all(self, train: LabeledImages, ctx: FitContext) -> PATEFMFit:
        """Partition, teachers, Confident-GNMax, student, accounting (module doc); deterministic from
        ``ctx.seed``. Progress: one fraction over the teachers' and the student's FixMatch steps."""
        from defenses.fixmatch import train_fixmatch
        from defenses.training import init_network

        p = self.params
        n, k_classes = len(train), train.num_classes
        self.check_train_size(n)
        n_teachers = int(p["num_teachers"])
        t_recipe, s_recipe = self.teacher_recipe(), self.student_recipe()
        owner = partition(n, n_teachers, np.random.default_rng(np.random.SeedSequence([ctx.seed, _PARTITION])))
        group = TEACHER_GROUP.get(ctx.train.model, 1)
        tw = p["teacher_width"]
        tctx = ctx if tw is None else dataclasses.replace(ctx, train=ctx.train.model_copy(update={"width": int(tw)}))
        work_t = n_teachers * t_recipe.steps
        total = work_t + s_recipe.steps

        teachers: list[nn.Module] = []
        for start in range(0, n_teachers, group):
            ks = list(range(start, min(n_teachers, start + group)))
            nets = [init_network(train, tctx, derived_seed(ctx.seed, _TEACHER_INIT, k)) for k in ks]
            done = start * t_recipe.steps

            def report(f: float, done: int = done, size: int = len(ks)) -> None:
                ctx.report("train", (done + f * size * t_recipe.steps) / total)

            teachers += train_fixmatch(nets, [train.x[owner == k] for k in ks], [train.y[owner == k] for k in ks],
                                       train.x, recipe=t_recipe, augment=train.augment, mean=train.mean,
                                       std=train.std, seed=derived_seed(ctx.seed, _TEACHER_TRAIN, start),
                                       device=ctx.device, progress=report)

        qrng = np.random.default_rng(np.random.SeedSequence([ctx.seed, _QUERIES]))
        order = qrng.permutation(n)[:min(int(p["query_pool"]), n)]
        votes = teacher_votes(teachers, train.x[order], train.mean, train.std, ctx.device, k_classes)
        answers = confident_gnmax(votes, float(p["threshold"]), float(p["sigma1"]), float(p["sigma2"]),
                                  int(p["queries"]), np.random.default_rng(np.random.SeedSequence([ctx.seed, _NOISE])))
        if len(answers.labels) == 0:
            raise RuntimeError(f"Confident-GNMax answered none of the {answers.asked} queries (threshold "
                               f"{p['threshold']}, sigma1 {p['sigma1']}, {n_teachers} teachers): nothing to train the "
                               "student on; lower the threshold or use more teachers")
        answered_idx = order[:answers.asked][answers.answered]
        student = train_student(init_network(train, ctx, derived_seed(ctx.seed, _STUDENT_INIT)), train.x[answered_idx],
                                answers.labels, train.x, s_recipe, train, derived_seed(ctx.seed, _STUDENT_TRAIN),
                                ctx.device, progress=lambda f: ctx.report("train", (work_t + f * s_recipe.steps) / total))

        priv = account(votes[:answers.asked], answers.answered, float(p["threshold"]), float(p["sigma1"]),
                       float(p["sigma2"]), float(p["delta"]))
        # diagnostics against the private labels (never used in training)
        true_q = train.y[order]
        record = {
            "label_epsilon": priv.epsilon,
            "label_delta": priv.delta,
            "label_mechanism": "confident-gnmax",
            "label_noise_scale": float(p["sigma2"]),
            "label_accounting": ("data-independent RDP: selection alpha/(2 sigma1^2) per query asked + release "
                                 "alpha/sigma2^2 per answered query; eps at delta by Balle et al. 2020, Prop. 12"),
            "label_epsilon_order": priv.order,
            "label_epsilon_classic": priv.epsilon_classic,
            "label_epsilon_data_dependent": priv.epsilon_data_dependent,
            "label_epsilon_data_dependent_order": priv.order_data_dependent,
            "num_teachers": n_teachers,
            "sigma1": float(p["sigma1"]),
            "sigma2": float(p["sigma2"]),
            "threshold": float(p["threshold"]),
            "queries_requested": int(p["queries"]),
            "queries_asked": answers.asked,
            "queries_answered": int(len(answers.labels)),
            "ensemble_accuracy": float((answers.labels == train.y[answered_idx]).mean()),
            "vote_accuracy": float((votes.argmax(axis=1) == true_q).mean()),
            "teacher_accuracy_mean": _outside_accuracy(teachers, train, order, owner, ctx.device),
        }
        served = TorchClassifier(student, train.mean, train.std, ctx.device, record=record)
        return PATEFMFit(owner=owner, teachers=teachers, query_order=order, votes=votes, answers=answers,
                         student=served)


def _outside_accuracy(teachers: list[nn.Module], train: LabeledImages, order: np.ndarray, owner: np.ndarray,
                      device: str) -> float | None:
    """Mean over teachers of each one's accuracy on the query-pool images outside its own partition
    (against the private labels: a diagnostic), or None when no teacher has such images (one teacher)."""
    accs = []
    for k, t in enumerate(teachers):
        idx = order[owner[order] != k]
        if len(idx):
            pred = TorchClassifier(t, train.mean, train.std, device).query(train.x[idx]).argmax(1)
            accs.append(float((pred == train.y[idx]).mean()))
    return float(np.mean(accs)) if accs else None


# Three utility levels: the seed's CIFAR-10 rows of Table 3 (ensemble / student accuracy 90.8 / 93.7%,
# 60.8 / 86.9%, 36.4 / 73.4%); the presets scale them to their datasets (docs/defenses.md).
class PATEFMHigh(PATEFM):
    name = "pate-fm-high"
    param_defaults: ClassVar[dict[str, Any]] = {**PATEFM.param_defaults, "num_teachers": 200, "sigma1": 160.0,
                                                "sigma2": 20.0, "threshold": 100.0, "queries": 500}


class PATEFMMedium(PATEFM):
    name = "pate-fm-medium"
    param_defaults: ClassVar[dict[str, Any]] = {**PATEFM.param_defaults, "num_teachers": 800, "sigma1": 800.0,
                                                "sigma2": 300.0, "threshold": 400.0, "queries": 250}


class PATEFMLow(PATEFM):
    name = "pate-fm-low"
    param_defaults: ClassVar[dict[str, Any]] = {**PATEFM.param_defaults, "num_teachers": 800, "sigma1": 800.0,
                                                "sigma2": 500.0, "threshold": 400.0, "queries": 250}
