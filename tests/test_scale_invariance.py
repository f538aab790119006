"""Per-model scale (issue 65): outputs multiplied by a temperature per model read private to LiRA for
that reason alone; lira-scaled, which the harness adds to every run's leak, reads them as the model
behind the temperature."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from attacks.base import AttackInput
from attacks.lira import LiRA, LiRAScaled, model_scales

TEMPERED = textwrap.dedent('''
    import numpy as np
    from defenses.undefended import Undefended
    from defenses.base import ServedModel

    class Tempered(ServedModel):
        def __init__(self, inner, t):
            self.inner, self.t = inner, t
        def query(self, x):
            return (self.inner.query(x) * self.t).astype(np.float32)

    class RandomTemperature(Undefended):
        """The undefended model, its logits times a temperature drawn per model (log-uniform in [0.1, 10]):
        argmax and accuracy unchanged."""
        name, description = "random-temperature", "undefended logits times a per-model temperature"
        cotrain = False

        def fit(self, train, ctx):
            t = float(np.exp(np.random.default_rng(ctx.seed).uniform(np.log(0.1), np.log(10.0))))
            return Tempered(super().fit(train, ctx), t)

        def stacks(self, train):
            return False
''')


def _inp(rng: np.random.Generator, temps: np.ndarray) -> tuple[AttackInput, AttackInput]:
    s, c, k = len(temps), 40, 10
    member = np.zeros((s, c), bool)
    for j in range(c):
        member[rng.permutation(s)[: s // 2], j] = True
    labels = rng.integers(0, k, c)
    logits = rng.normal(size=(s, c, 1, k))
    logits[..., 0, :][np.arange(s)[:, None], np.arange(c)[None], labels[None]] += 2.0 + 2.0 * member
    pop = rng.normal(size=(s, 30, 1, k))
    plain = AttackInput({"logits": logits, "population_logits": pop}, labels, member, rng.integers(0, k, 30), False)
    t = temps[:, None, None, None]
    hot = AttackInput({"logits": logits * t, "population_logits": pop * t}, labels, member, plain.population_labels,
                      False)
    return plain, hot


def test_lira_scaled_does_not_see_a_per_model_temperature():
    """Temperatures with geometric mean 1: lira-scaled's scores on the tempered outputs are its scores
    on the plain ones (to float rounding); LiRA's are not."""
    rng = np.random.default_rng(0)
    temps = np.exp(rng.uniform(np.log(0.1), np.log(10.0), 12))
    temps /= np.exp(np.log(temps).mean())
    plain, hot = _inp(rng, temps)
    np.testing.assert_allclose(model_scales(hot) / model_scales(plain), temps, rtol=1e-12)
    a, b = LiRAScaled().score(plain), LiRAScaled().score(hot)
    for v in a:
        np.testing.assert_allclose(a[v], b[v], rtol=1e-9, atol=1e-9)
    assert not np.allclose(LiRA().score(plain)["online-logit-noaug-persample"],
                           LiRA().score(hot)["online-logit-noaug-persample"])


@pytest.mark.slow
def test_a_defense_that_serves_a_random_temperature_per_model_reads_as_its_twin(tmp_path):
    """Issue 65's done-when: the undefended model served at a random per-model temperature reads a leak
    within 0.8x of the undefended run's (LiRA alone falls far below it)."""
    from harness import evaluate

    plugin = tmp_path / "tempered.py"
    plugin.write_text(TEMPERED)
    common = {"audit.models": 16, "audit.size": 100, "train.epochs": 20, "attack.bootstrap": 50, "run.level": "sample",
              "run.out": str(tmp_path / "runs"), "run.workers": 1}
    twin = evaluate("undefended", "quick", common)
    hot = evaluate(f"{plugin}:RandomTemperature", "quick", common)
    assert hot.data["attack_roles"]["adapted"] == ["lira-scaled"]
    assert hot.leak("sample").tpr >= 0.8 * twin.leak("sample").tpr > 0.3
    lira = next(a for a in hot.data["sample"]["attacks"] if a["name"] == "lira" and a["primary"])
    assert lira["tpr_at_fpr"]["0.001"] < 0.5 * twin.leak("sample").tpr  # what LiRA alone reads
