"""DP-SGD's clipped sum by its two paths, one thread: per-sample gradients with ``torch.func``
(``vmap(grad)``, then :func:`defenses.dpsgd_trainer.sum_clipped`) against the layer-by-layer sum of
:class:`defenses.dpsgd_layers.LayerClipper` (docs/defenses.md, DP-SGD).

    python benchmarks/bench_dp_clipping.py [--repeats 20]

Cases: the scattering CNN head (243 x 8 x 8 maps, batch 256 in physical chunks of 64 for the vmap
path, one call for the layer path) with the first convolution's patch products computed once
(training on fixed features) and without; the quick preset's MLP (8 x 8 digits, width 256, 64
samples) at augmentation multiplicity K = 1, 4, 16. Each: the median milliseconds of ``--repeats``
calls after one warm-up call, and the largest difference between the two sums relative to each
parameter's largest entry.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    import torch

    from defenses.dpsgd_layers import LayerClipper
    from defenses.dpsgd_trainer import per_sample_grad_fn, sum_clipped
    from defenses.models import build_model
    from defenses.scatter_models import ScatterCNN

    torch.set_num_threads(1)
    torch.manual_seed(0)

    def median_ms(f) -> float:
        f()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    def vmap_sum(net, x, y, c, chunk):
        fn = per_sample_grad_fn(net)
        params = {k: p.detach() for k, p in net.named_parameters()}

        def run():
            total = None
            for i in range(0, len(x), chunk):
                part = sum_clipped(fn(params, {}, x[i : i + chunk], y[i : i + chunk].view(-1, 1)), c)
                total = part if total is None else {k: total[k] + v for k, v in part.items()}
            return total
        return run

    def diff(a, b) -> float:
        return max(float((a[k] - b[k]).abs().max() / b[k].abs().max()) for k in b)

    rows = []
    cnn = ScatterCNN(243, 8, 10)
    x, y = torch.randn(256, 1, 243, 8, 8) * 0.5, torch.randint(0, 10, (256,))
    ref = vmap_sum(cnn, x, y, 0.1, 64)
    plain = LayerClipper(cnn)
    fixed = LayerClipper(cnn, fixed_inputs=x[:, 0])
    idx = torch.arange(256)
    rows.append(("scatter-cnn, batch 256", median_ms(ref),
                 [("layers", median_ms(lambda: plain.clipped_sum(x, y, 0.1)), diff(plain.clipped_sum(x, y, 0.1), ref())),
                  ("layers, first layer's products once", median_ms(lambda: fixed.clipped_sum(x, y, 0.1, idx)),
                   diff(fixed.clipped_sum(x, y, 0.1, idx), ref()))]))
    mlp = build_model("mlp", (1, 8, 8), 10, 256)
    for k in (1, 4, 16):
        xm, ym = torch.randn(64, k, 1, 8, 8), torch.randint(0, 10, (64,))
        ref = vmap_sum(mlp, xm, ym, 1.0, 64)
        lay = LayerClipper(mlp)
        rows.append((f"mlp width 256, 64 samples, K = {k}", median_ms(ref),
                     [("layers", median_ms(lambda: lay.clipped_sum(xm, ym, 1.0)), diff(lay.clipped_sum(xm, ym, 1.0), ref()))]))
    print(f"torch {torch.__version__}, one thread, median of {args.repeats} calls")
    for case, v, others in rows:
        print(f"{case}: vmap {v:.1f} ms")
        for name, ms, d in others:
            print(f"    {name}: {ms:.1f} ms ({v / ms:.1f}x), largest relative difference {d:.1e}")


if __name__ == "__main__":
    main()
