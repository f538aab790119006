"""Natural near-duplicate canaries and the neighbour-query attacks (the paper's SELENA section):
LiRA on each canary against LiRA on its matched near-duplicate, for SELENA and for the undefended
model under the same recipe.

    python benchmarks/bench_near_duplicates.py [--preset quick] [--data-dir PATH] [--out runs/bench-near-duplicates]
        [--defenses selena,undefended] [--workers 2]

Each defense runs as ``harness evaluate DEFENSE --canary near-duplicates --set
attack.names=[lira,rmia,threshold,lira-neighbour-student]`` (finished runs resume at no cost); SELENA
adds its declared ``lira-neighbour``. Two neighbour queries: ``lira-neighbour``, the paper's
``splitai_nn`` (SELENA's Split-AI ensemble at the neighbour: the mean softmax of the teachers that
never trained on the neighbour; SELENA only), and ``lira-neighbour-student`` (the served model at
the neighbour). Printed per defense: the matched pairs' cosine similarities, and for ``lira`` and
each neighbour attack on the near-duplicate canaries the primary variant's TPR at 0.1% and 1% FPR
and AUC, and the best variant at 0.1% FPR (each variant's own TPRs, as the paper reads them); then
the level's figures (the leak, the declared headline) at its figure FPR and the headline test's
p-value.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness_cli import evaluate_into

from harness.core import jsonio

#: the attacks every defense runs (SELENA adds its declared lira-neighbour)
ATTACKS = "lira,rmia,threshold,lira-neighbour-student"


def summary(run_dir: Path) -> dict:
    r = jsonio.loads((run_dir / "results.json").read_text())
    s = r["sample"]
    out = {"similarity": s["canary_info"]["similarity"], "embedder": s["canary_info"]["embedder"], "attacks": {}}
    for name in ("lira", "lira-neighbour", "lira-neighbour-student"):
        rows = [a for a in s["attacks"] if a["name"] == name]
        if not rows:  # lira-neighbour: SELENA's declared attack (it reads Split-AI), not run for others
            continue
        primary = next(a for a in rows if a.get("primary"))
        best = max(rows, key=lambda a: a["tpr_at_fpr"]["0.001"])
        out["attacks"][name] = {"primary": primary["variant"], "tpr0.1": primary["tpr_at_fpr"]["0.001"],
                                "tpr1": primary["tpr_at_fpr"]["0.01"], "auc": primary["auc"],
                                "best": best["variant"], "best_tpr0.1": best["tpr_at_fpr"]["0.001"]}
    pop = next(a for a in r["population"]["attacks"] if a["name"] == "lira" and a.get("primary"))
    out["population lira"] = {"tpr0.1": pop["tpr_at_fpr"]["0.001"], "auc": pop["auc"]}
    fig = s["figure"]
    out["fpr"] = fig["fpr"]
    out["figures"] = {w: fig[w] for w in ("leak", "declared") if fig.get(w)}
    out["test p"] = (fig.get("flag") or {}).get("p_value")
    out["flagged"] = bool((fig.get("flag") or {}).get("flagged"))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="quick")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", type=Path, default=Path("runs/bench-near-duplicates"))
    p.add_argument("--defenses", default="selena,undefended")
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    extra = ["--data-dir", a.data_dir] if a.data_dir else []
    for defense in a.defenses.split(","):
        run_dir, wall = evaluate_into(a.out / a.preset / defense, defense, "--preset", a.preset, "--canary",
                                      "near-duplicates", "--set", f"attack.names=[{ATTACKS}]",
                                      "--workers", str(a.workers), *extra)
        s = summary(run_dir)
        sim = s["similarity"]
        print(f"{defense} ({a.preset}, {s['embedder']} embeddings; pair cosine similarity max {sim['max']:.3f}, "
              f"median {sim['median']:.3f}, min {sim['min']:.3f}; {wall:.0f} s; {run_dir})")
        for name, m in s["attacks"].items():
            print(f"  {name:22s} primary {m['primary']}: TPR@0.1% {100 * m['tpr0.1']:.2f}%, TPR@1% "
                  f"{100 * m['tpr1']:.2f}%, AUC {m['auc']:.3f}; best at 0.1%: {m['best']} "
                  f"{100 * m['best_tpr0.1']:.2f}%")
        p = s["population lira"]
        print(f"  population level, lira primary: TPR@0.1% {100 * p['tpr0.1']:.2f}%, AUC {p['auc']:.3f}")
        for w, rec in s["figures"].items():
            iv = (f"[{100 * rec['ci'][0]:.1f}, {100 * rec['ci'][1]:.1f}]" if rec.get("ci") else "")
            iv += f" (>= {100 * rec['lower']:.2f}, best of {rec['candidates']})" if rec.get("lower") is not None else ""
            print(f"  sample {'leak (ranked)' if w == 'leak' else 'declared headline'}: {rec['name']}:{rec['variant']} "
                  f"{100 * rec['tpr']:.2f}% {iv} at {100 * s['fpr']:g}% FPR")
        if s["test p"] is not None:
            print(f"  sample headline test (does any variant beat the declared headline?): p = {s['test p']:.3f}"
                  + (" (flagged)" if s["flagged"] else ""))


if __name__ == "__main__":
    main()
