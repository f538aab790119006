"""Several models of a defense trained at once from its own ``fit``: co-training (a plugin's models).

A plugin's ``fit`` is arbitrary code, but most call the building blocks: the preset's network
(:func:`defenses.training.init_network`) trained by :func:`defenses.training.train_classifier`, often
with a loss, targets or an epoch hook of their own. :func:`fit_together` trains a group of G models
(``run.group_size``) by running their G ``fit`` calls side by side, each in a thread of its own and
**one at a time**: model 0's ``fit`` runs until it calls ``train_classifier`` (or returns), then
model 1's, and so on. When every model's ``fit`` waits in ``train_classifier`` (or is done), the
calls that can train together (:func:`defenses.stacked.call_key`: the harness's own network, one
recipe, device and layout) train as one stacked loop (:func:`defenses.stacked.train_calls`), each
model with its own data, seed, data order, targets, loss and epoch hook, as the built-in defenses'
models train; then each ``fit`` goes on, with its network trained, until its next call or its end.
A call that cannot train stacked (a network of the plugin's own, a model whose group-mates called
something else) trains as it always did, by ``train_classifier`` alone, in its model's thread.

What each model's code sees is what it sees alone:

- its own shallow copy of the defense object: an attribute one model's ``fit`` sets
  (``self.net = net``) is not another's;
- its global RNGs (torch's on the CPU and the training device, numpy's legacy ``np.random``,
  Python's ``random``) are its own, seeded as for a ``fit`` alone (``seed_rngs``) and swapped in
  whenever its ``fit`` or its epoch hook runs; during a stacked loop its loss draws from its own
  torch RNG too, while numpy's and Python's global RNGs there are one stream of the group's
  (seeded from the first model's seed): swapping numpy's state per step costs more than the step;
- its network is the stacked loop's current weights (its parameters are views of them), in its
  loss and its epoch hook;
- its loss is called on its own logits, targets and epoch, one model at a time, or, where every
  model's loss is one function (the same code and captured values: a loss that reads only the
  defense's parameters), once for all of them through ``torch.func.vmap``, which computes each
  model's value as its own call would (:class:`defenses.stacked._ModelLosses`): a loss should then
  be a function of its arguments and of what it captured, and keep no count of its calls;
- the models run in a fixed order, so a group trains the same models on every run.

The models of a group run in one process (one after another outside the stacked loops); the
runner's executor still trains the groups in parallel processes, one per core
(docs/executors.md). A defense opts out with ``cotrain = False`` (:class:`defenses.base.Defense`).
"""

from __future__ import annotations

import contextlib
import copy
import random
import threading
from typing import Any, Callable, Iterator

import numpy as np
import torch

from defenses import training
from defenses.base import Defense, FitContext, LabeledImages, ServedModel
from defenses.stacked import ModelCall, ModelCode, call_key, train_calls

#: a model's state in its group: its code may run, runs, waits in train_classifier, or has returned / raised
_READY, _RUNNING, _WAITING, _DONE = "ready", "running", "waiting", "done"


class FitFailed(Exception):
    """Model ``index`` of the group (its position in the lists given) raised ``error`` in its own
    code: its ``fit``, or its loss or epoch hook during a stacked loop."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(f"model {index}: {type(error).__name__}: {error}")
        self.index, self.error = index, error


class _Abandoned(BaseException):
    """Raised in a model's thread whose group stopped (another model failed, Ctrl-C): ends its fit."""


class GlobalRngs:
    """Capture and restore the global RNGs a defense's code may draw from: torch's on the CPU and on
    the training device (CUDA, MPS), numpy's legacy global RNG and Python's ``random``."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)

    def _device_state(self) -> Any:
        if self.device.type == "cuda":
            return torch.cuda.get_rng_state(self.device)
        if self.device.type == "mps":
            return torch.mps.get_rng_state()
        return None

    def _set_device_state(self, state: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(state, self.device)
        elif self.device.type == "mps":
            torch.mps.set_rng_state(state)

    def capture(self) -> dict[str, Any]:
        return {**self.capture_torch(), "numpy": np.random.get_state(), "random": random.getstate()}

    def restore(self, state: dict[str, Any]) -> None:
        self.restore_torch(state)
        np.random.set_state(state["numpy"])
        random.setstate(state["random"])

    def capture_torch(self) -> dict[str, Any]:
        return {"torch": torch.get_rng_state(), "device": self._device_state()}

    def restore_torch(self, state: dict[str, Any]) -> None:
        torch.set_rng_state(state["torch"])
        if state["device"] is not None:
            self._set_device_state(state["device"])


class _Model:
    """One model of the group: its copy of the defense, its thread, its RNG state, and its pending
    ``train_classifier`` call."""

    def __init__(self, session: _Session, index: int, defense: Defense, train: LabeledImages,
                 ctx: FitContext) -> None:
        self.session, self.index, self.train, self.ctx = session, index, train, ctx
        self.defense = copy.copy(defense)
        self.go = threading.Event()
        self.state = _READY
        self.rngs: dict[str, Any] = {}
        self.call: ModelCall | None = None
        self.key: tuple[Any, ...] | None = None
        self.trained: bool = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=session.body, args=(self,), name=f"harness-fit-{index}", daemon=True)


def _plain_thread_state(device: torch.device) -> bool:
    """The thread-local torch state a stacked loop runs with: gradients on, no autocast (a call
    made under another, e.g. inside ``torch.autocast``, trains alone, in its own thread)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return False
    try:
        return not any(torch.is_autocast_enabled(t) for t in {"cpu", device.type})
    except TypeError:  # torch before 2.4: no device argument
        return not torch.is_autocast_enabled()


class _Session:
    """The G models of one group and the baton that lets one of them run at a time."""

    def __init__(self, defense: Defense, trains: list[LabeledImages], ctxs: list[FitContext],
                 seed_rngs: Callable[[int], None]) -> None:
        self.seed_rngs = seed_rngs
        self.models = [_Model(self, i, defense, t, c) for i, (t, c) in enumerate(zip(trains, ctxs))]
        self.copies = {id(m.defense) for m in self.models}
        self.rngs = GlobalRngs(ctxs[0].device)
        self.yielded = threading.Event()
        self.abandoned = False
        self.group_rngs: dict[str, Any] = {}

    # --- in a model's thread ------------------------------------------------------------------
    def body(self, model: _Model) -> None:
        def together(*args: Any) -> bool:  # train_classifier's arguments (defenses.training.GROUP)
            return self.request(model, ModelCall(*args))

        training.GROUP.train = together
        model.go.wait()
        model.go.clear()
        try:
            if not self.abandoned:
                model.result = model.defense.fit(model.train, model.ctx)
        except _Abandoned:
            pass
        except BaseException as e:  # noqa: BLE001 (handed to the caller's thread, which raises it)
            model.error = e
        finally:
            training.GROUP.train = None
            model.state = _DONE
            self.yielded.set()

    def request(self, model: _Model, call: ModelCall) -> bool:
        """Wait, in ``model``'s thread, until the group has trained ``call`` (True) or left it to train alone (False)."""
        key = call_key(call) if _plain_thread_state(torch.device(call.ctx.device)) else None
        if key is None:
            return False
        model.call, model.key, model.trained = call, key, False
        model.state = _WAITING
        self.yielded.set()
        model.go.wait()
        model.go.clear()
        if self.abandoned:
            raise _Abandoned()
        model.call = model.key = None
        return model.trained

    # --- in the caller's thread ----------------------------------------------------------------
    def run(self) -> list[ServedModel]:
        for m in self.models:
            self.seed_rngs(m.index)
            m.rngs = self.rngs.capture()
        group_seed = int(np.random.SeedSequence([self.models[0].ctx.seed, 0xC07A]).generate_state(1)[0])
        torch.manual_seed(group_seed)
        np.random.seed(group_seed)
        random.seed(group_seed)
        self.group_rngs = self.rngs.capture()
        for m in self.models:
            m.thread.start()
        finished = False
        try:
            while True:
                for m in self.models:
                    if m.state == _READY:
                        self._resume(m)
                    if m.error is not None:
                        raise FitFailed(m.index, m.error)
                waiting = [m for m in self.models if m.state == _WAITING]
                if not waiting:
                    break
                self._train(waiting)
            finished = True
            return [m.result for m in self.models]
        finally:
            if not finished:
                self._abandon()

    def _resume(self, model: _Model) -> None:
        """Let ``model``'s code run, with its own global RNGs, until it waits or ends."""
        self.rngs.restore(model.rngs)
        model.state = _RUNNING
        self.yielded.clear()
        model.go.set()
        self.yielded.wait()
        model.rngs = self.rngs.capture()

    def _train(self, waiting: list[_Model]) -> None:
        """Train the waiting calls that share a key stacked (a call alone in its key trains alone)."""
        by_key: dict[tuple[Any, ...], list[_Model]] = {}
        for m in waiting:
            by_key.setdefault(m.key, []).append(m)  # type: ignore[arg-type]
        for members in by_key.values():
            if len(members) > 1:
                self.rngs.restore(self.group_rngs)
                try:
                    train_calls([m.call for m in members], _Code(self, members))  # type: ignore[misc]
                finally:
                    self.group_rngs = self.rngs.capture()
                for m in members:
                    m.trained = True
            for m in members:
                m.state = _READY

    def _abandon(self) -> None:
        """Stop the group: every model waiting to run ends its fit (:class:`_Abandoned`)."""
        self.abandoned = True
        for m in self.models:
            if m.state in (_READY, _WAITING):
                m.go.set()


class _Code(ModelCode):
    """A stacked loop's calls of model g's own code: with its own global RNGs (its loss: torch's,
    swapped per call; its epoch hook: all of them), and its failure named as model g's."""

    def __init__(self, session: _Session, members: list[_Model]) -> None:
        self.rngs, self.members, self.copies = session.rngs, members, session.copies

    def equivalent(self, a: Any, b: Any) -> bool:
        """Two models' copies of the defense whose attributes are the same objects (or equal scalars):
        a loss that reads ``self.params`` is one function for every model, unless a ``fit`` set an
        attribute of its own (``self.net = net``), which its copy keeps to itself."""
        if a is b:
            return True
        if id(a) not in self.copies or id(b) not in self.copies:
            return False
        va, vb = vars(a), vars(b)
        return va.keys() == vb.keys() and all(
            va[k] is vb[k] or (type(va[k]) is type(vb[k]) and isinstance(va[k], (int, float, str, bool, type(None)))
                               and repr(va[k]) == repr(vb[k])) for k in va)

    @contextlib.contextmanager
    def loss(self, g: int) -> Iterator[None]:
        m = self.members[g]
        self.rngs.restore_torch(m.rngs)
        try:
            yield
        except Exception as e:
            raise FitFailed(m.index, e) from e
        finally:
            m.rngs.update(self.rngs.capture_torch())

    @contextlib.contextmanager
    def hook(self, g: int) -> Iterator[None]:
        m = self.members[g]
        outer = self.rngs.capture()
        self.rngs.restore(m.rngs)
        try:
            yield
        except Exception as e:
            raise FitFailed(m.index, e) from e
        finally:
            m.rngs = self.rngs.capture()
            self.rngs.restore(outer)


def fit_together(defense: Defense, trains: list[LabeledImages], ctxs: list[FitContext],
                 seed_rngs: Callable[[int], None]) -> list[ServedModel]:
    """``[defense.fit(trains[i], ctxs[i]) for i ...]``, the calls co-trained (module docstring): their
    ``train_classifier`` calls trained stacked where they can, each ``fit`` on a shallow copy of
    ``defense`` of its own (an attribute one model's ``fit`` sets is not the next one's). ``seed_rngs(i)``
    seeds the global RNGs as for model i's ``fit`` alone. Raises :class:`FitFailed` naming the first
    model whose own code raised; the group's other ``fit`` calls are then abandoned."""
    if not (len(trains) == len(ctxs) >= 1):
        raise ValueError("fit_together needs one context per training set, at least one")
    return _Session(defense, trains, ctxs, seed_rngs).run()
