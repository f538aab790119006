"""The page of one ``harness audit-one-run`` DP audit (its folder's report.html): the design, the
audit bracket (:func:`leaderboard.bracket.bracket_section`) and the config."""

from __future__ import annotations

from html import escape
from typing import Any

from harness.core import jsonio
from leaderboard.bracket import bracket_section
from leaderboard.site import _page


def one_run_page(result: dict[str, Any]) -> str:
    """The self-contained page of one ``harness audit-one-run`` DP audit: the bracket, the design and
    the config."""
    spec = result["spec"]
    tgt = result["target"]
    facts = {
        "defense": f"{result['defense']} ({result['dataset']}/{result['preset']})",
        "design": (f"{spec['canaries']} {spec['canary']} canaries of the {result['pool_size']}-sample pool, each in the "
                   f"target's training set with probability 1/2 ({result['bracket']['attack']['members']} were)"),
        "attack": (f"{result['bracket']['attack']['variant']}" + (f", {spec['shadows']} shadow models"
                                                                 if spec["shadows"] else ", no shadow model")),
        "target's test accuracy": f"{100 * tgt['test_accuracy']:.1f}% ({tgt['train_size']} training samples)",
        "seed": str(result["seed"]),
    }
    rows = "".join(f'<tr><th class="name">{escape(k)}</th><td class="wrap">{escape(v)}</td></tr>' for k, v in facts.items())
    title = f"audit-one-run: {result['defense']} ({result['dataset']}/{result['preset']})"
    return _page(title, f"""<h1>{escape(title)}</h1><p><a href="result.json" download>download result.json</a></p>
<table class="summary">{rows}</table>{bracket_section(result['bracket'])}
<h2>Config</h2><pre>{escape(jsonio.dumps(result.get('config', {}), indent=2, sort_keys=True))}</pre>""")
