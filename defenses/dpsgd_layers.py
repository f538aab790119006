"""DP-SGD's clipped sum for networks of linear and convolutional layers, without a per-sample copy of
every gradient (:class:`LayerClipper`; used by :class:`defenses.dpsgd_trainer.DPSGDTrainer`).

The clipped sum of a batch is ``sum_i min(1, C / ||g_i||) g_i`` with ``g_i`` sample i's gradient of its
loss (the mean cross-entropy of its K augmented copies). For a layer whose output ``z`` is a linear
function of its parameters, sample i's gradient of the layer's weight is a contraction of two
things the forward and backward passes already hold: the layer's inputs ``a`` and the loss's
gradient ``e = dL/dz`` at its outputs (one backward pass of the summed loss gives ``e`` for every
sample at once, since sample i's loss depends on sample i's rows only):

- ``Linear`` (inputs (T, D) per sample, T = K copies): ``dW_i = sum_t e_it a_it^T``, ``db_i = sum_t e_it``;
- ``Conv2d``: the same with the positions of every copy as t and the unfolded patches
  (``torch.nn.functional.unfold``, D = in_channels x kernel area) as a.

So ``||g_i||^2`` is the sum over layers of ``||dW_i||^2 + ||db_i||^2``: computed from ``e`` and
``a`` per layer (``||e_i||^2 (||a_i||^2 + 1)`` where T = 1, else ``dW_i`` formed a few samples at a
time and summed). The clipped sum then needs no per-sample gradient at all: it is the gradient of
the batch with ``e_i`` scaled by the clip factor ``f_i`` (for Conv2d
``torch.nn.grad.conv2d_weight``, for Linear ``(F E)^T A``). This is the book-keeping form of
per-sample clipping (Bu et al., "Differentially private optimization on large model at small cost",
ICML 2023): the same sum as :func:`defenses.dpsgd_trainer.sum_clipped` over the per-sample gradients
of :func:`defenses.dpsgd_trainer.per_sample_grad_fn` (tests/test_dpsgd_layers.py), in about the
arithmetic of one more backward pass instead of a copy of the parameters per sample.

It applies to a network whose trainable parameters all sit in ``nn.Linear`` and ``nn.Conv2d``
(groups 1, zero padding given as numbers) modules, each called once per forward pass on 2-D
(Linear) or 4-D (Conv2d) inputs, whose outputs nothing modifies in place (:func:`supports`, and a
check at each pass that raises otherwise): the scattering CNN head, the MLP. GroupNorm's affine
parameters (cnn-gn, WRN16-4-gn) are not covered; those keep the vmap path.
"""

from __future__ import annotations

from typing import Any

from harness.core.lazy import LazyModule

torch = LazyModule("torch")
nn = LazyModule("torch.nn")
F = LazyModule("torch.nn.functional")

Grads = dict[str, "torch.Tensor"]

#: floats of the per-sample weight gradients formed at once when a layer's norms need them (T > 1):
#: 4 M floats, 16 MB
FORM_FLOATS = 4 * 2**20


def _covered(m: Any) -> bool:
    if isinstance(m, nn.Linear):
        return True
    return (isinstance(m, nn.Conv2d) and m.groups == 1 and m.padding_mode == "zeros"
            and not isinstance(m.padding, str))


def supports(net: Any) -> bool:
    """Whether every trainable parameter of ``net`` belongs to a covered ``Linear`` or ``Conv2d``
    module (the module docstring's conditions that can be read without running the network)."""
    for m in net.modules():
        if any(p.requires_grad for p in m.parameters(recurse=False)) and not _covered(m):
            return False
    return any(True for _ in net.parameters())


def clip_factors(norms: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """``min(1, C / ||g_i||)`` per sample, exactly 1 where ``||g_i|| <= C``."""
    return torch.where(norms > max_grad_norm, max_grad_norm / norms.clamp_min(1e-12), torch.ones_like(norms))


class LayerClipper:
    """The clipped sum of :func:`defenses.dpsgd_trainer.sum_clipped` for ``net`` (see the module
    docstring), from one forward and one backward pass and per-layer contractions.

    ``fixed_inputs``: the training rows (n, C, H, W) where they never change (features computed
    once, no augmentation): the layer that reads the network's input directly then has its
    ``A_i A_i^T`` computed once per row (:meth:`input_grams`, (n, T, T)) and looked up by the rows'
    indices at each step, instead of unfolding its inputs again (the scattering CNN's first
    convolution: 2 187-long patches at 64 positions, most of a step's arithmetic otherwise)."""

    def __init__(self, net: Any, fixed_inputs: torch.Tensor | None = None) -> None:
        if not supports(net):
            raise ValueError(f"{type(net).__name__} has parameters outside Linear and Conv2d layers")
        self.net = net
        self.layers = [(name, m) for name, m in net.named_modules()
                       if any(p.requires_grad for p in m.parameters(recurse=False))]
        self._gram_layer: int | None = None
        self._grams: torch.Tensor | None = None
        if fixed_inputs is not None:
            with torch.no_grad():
                _, recs, first = self._forward(fixed_inputs[:1])
            if first is not None and isinstance(self.layers[first][1], nn.Conv2d):
                self._gram_layer = first
                self._grams = self.input_grams(self.layers[first][1], fixed_inputs)

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], int | None]:
        """The network's output on x; per layer in ``self.layers``' order, (input, output); and which
        layer read x itself (None: none did)."""
        seen: dict[int, list] = {}

        def hook(m: Any, inputs: tuple, out: torch.Tensor) -> None:
            seen.setdefault(id(m), []).append((inputs[0], out, out._version))

        handles = [m.register_forward_hook(hook) for _, m in self.layers]
        try:
            out = self.net(x)
        finally:
            for h in handles:
                h.remove()
        recs, first = [], None
        for j, (name, m) in enumerate(self.layers):
            calls = seen.get(id(m), [])
            if len(calls) != 1:
                raise RuntimeError(f"layer {name!r} ran {len(calls)} times in one forward pass; the layer-wise "
                                   "clipped sum needs each trainable layer called once")
            a, z, version = calls[0]
            if z._version != version:
                raise RuntimeError(f"the output of layer {name!r} was modified in place; the layer-wise clipped "
                                   "sum needs the layers' outputs as they returned them")
            want = 2 if isinstance(m, nn.Linear) else 4
            if a.dim() != want:
                raise RuntimeError(f"layer {name!r} got a {a.dim()}-D input; the layer-wise clipped sum covers "
                                   f"{want}-D inputs")
            if a is x:
                first = j
            recs.append((a.detach(), z))
        return out, recs, first

    def clipped_sum(self, x: torch.Tensor, y: torch.Tensor, max_grad_norm: float,
                    idx: torch.Tensor | None = None) -> Grads:
        """``sum_i min(1, C / ||g_i||) g_i`` for inputs x (n, K, ...) and labels y (n,), g_i the gradient
        of ``mean_k CE(net(x[i, k]), y[i])`` (the convention of
        :func:`defenses.dpsgd_trainer.per_sample_grad_fn`). ``idx``: x's rows of ``fixed_inputs``
        (K = 1), where the clipper was built with them."""
        n, k = x.shape[0], x.shape[1]
        with torch.enable_grad():
            out, recs, _ = self._forward(x.reshape(n * k, *x.shape[2:]))
            loss = F.cross_entropy(out, y.repeat_interleave(k), reduction="sum") / k
            errors = torch.autograd.grad(loss, [z for _, z in recs])
        sq = torch.zeros(n, dtype=out.dtype, device=out.device)
        for j, ((_, m), (a, _), e) in enumerate(zip(self.layers, recs, errors)):
            gram = None
            if j == self._gram_layer and idx is not None and k == 1:
                gram = self._grams[idx]  # type: ignore[index]
            sq += self._sq_norms(m, a, e, n, k, gram)
        f = clip_factors(torch.sqrt(sq), max_grad_norm)
        total: Grads = {}
        with torch.no_grad():
            for (name, m), (a, _), e in zip(self.layers, recs, errors):
                fe = e * f.repeat_interleave(k).view(-1, *([1] * (e.dim() - 1)))
                prefix = f"{name}." if name else ""
                if isinstance(m, nn.Linear):
                    total[prefix + "weight"] = fe.t() @ a
                    if m.bias is not None:
                        total[prefix + "bias"] = fe.sum(0)
                else:
                    total[prefix + "weight"] = torch.nn.grad.conv2d_weight(
                        a, m.weight.shape, fe, stride=m.stride, padding=m.padding, dilation=m.dilation, groups=1)
                    if m.bias is not None:
                        total[prefix + "bias"] = fe.sum((0, 2, 3))
        # in the network's parameter order (the order the trainer draws the noise in)
        return {name: total[name] for name, _ in self.net.named_parameters() if name in total}

    @staticmethod
    def _rows(m: Any, a: torch.Tensor, e: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer m's inputs and output errors as (n, T, D) and (n, T, O): sample i's T = K x positions
        rows (sample-major: sample i's K copies are rows i K .. i K + K - 1 of a and e)."""
        if isinstance(m, nn.Linear):
            return a.view(n, k, -1), e.view(n, k, -1)
        u = F.unfold(a, m.kernel_size, dilation=m.dilation, padding=m.padding, stride=m.stride)
        # (n K, D, P) -> (n, K P, D); errors (n K, O, P) -> (n, K P, O)
        at = u.view(n, k, u.shape[1], -1).permute(0, 1, 3, 2).reshape(n, -1, u.shape[1])
        et = e.flatten(2).view(n, k, e.shape[1], -1).permute(0, 1, 3, 2).reshape(n, -1, e.shape[1])
        return at, et

    @staticmethod
    def input_grams(m: Any, a: torch.Tensor, chunk: int = 256) -> torch.Tensor:
        """``A_i A_i^T`` (n, P, P) for a Conv2d layer's inputs a (n, C, H, W): the inner products of
        each sample's unfolded patches at its P output positions."""
        with torch.no_grad():
            out = []
            for i in range(0, len(a), chunk):
                u = F.unfold(a[i : i + chunk], m.kernel_size, dilation=m.dilation, padding=m.padding,
                             stride=m.stride)
                out.append(torch.bmm(u.transpose(1, 2), u))
            return torch.cat(out)

    @classmethod
    def _sq_norms(cls, m: Any, a: torch.Tensor, e: torch.Tensor, n: int, k: int,
                  gram: torch.Tensor | None = None) -> torch.Tensor:
        """Each sample's ``||dW_i||^2 + ||db_i||^2`` for layer m, from its inputs a and output errors e.
        With ``dW_i = E_i^T A_i`` (E_i: (T, O), A_i: (T, D)): ``||dW_i||^2 = sum(A_i A_i^T * E_i E_i^T)``
        (the ghost norm; T^2 (D + O) products) where that is cheaper than forming dW_i (T D O), or
        where ``gram`` holds ``A_i A_i^T`` already (a Conv2d with K = 1); ``||db_i||^2 = ||sum_t e_it||^2``."""
        with torch.no_grad():
            if isinstance(m, nn.Linear) and k == 1:  # rank one: ||e_i a_i^T||^2 = ||e_i||^2 ||a_i||^2
                ee = e.pow(2).sum(1)
                out = ee * a.pow(2).sum(1)
                return out + ee if m.bias is not None else out
            if gram is not None:
                et = e.flatten(2).transpose(1, 2)
                out = (gram * torch.bmm(et, et.transpose(1, 2))).sum((1, 2))
            else:
                at, et = cls._rows(m, a, e, n, k)
                t, d, o = at.shape[1], at.shape[2], et.shape[2]
                if t * (d + o) < d * o:
                    out = (torch.bmm(at, at.transpose(1, 2)) * torch.bmm(et, et.transpose(1, 2))).sum((1, 2))
                else:
                    out = torch.empty(n, dtype=e.dtype, device=e.device)
                    step = max(1, FORM_FLOATS // (o * d))
                    for i in range(0, n, step):  # dW_i = E_i^T A_i, a few samples at a time
                        w = torch.bmm(et[i : i + step].transpose(1, 2), at[i : i + step])
                        out[i : i + step] = w.pow(2).sum((1, 2))
            if m.bias is not None:
                sums = e.view(n, k, -1).sum(1) if isinstance(m, nn.Linear) else e.view(n, k, e.shape[1], -1).sum((1, 3))
                out += sums.pow(2).sum(1)
            return out
