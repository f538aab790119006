"""Leaderboard submissions: bundle a finished run, and verify a bundle before it joins the site.

A bundle (``harness submit RUN_DIR -o entry.tar.gz``) holds what the attacks read and what the
numbers claim: ``results.json``, ``manifest.json``, ``config.json``, ``data.npz`` (the split the
models trained on), every level's ``design.npz`` (audit samples, membership masks, canaries) and
every model's signals file, ``hashes.json`` (SHA-256 of each of those files), and for a file-plugin
defense its source file (``defense_source/``). Saved models, ROC CSVs and progress files stay out.

``harness leaderboard add entry.tar.gz --site site/`` (:func:`verify_bundle`) refuses a bundle, with
one line saying why, unless:

1. it extracts safely (regular files only, no absolute or ``..`` paths, under the size limit);
2. every file is listed in ``hashes.json`` with its hash, and every listed file is there;
3. results.json has the keys of docs/results-json.md and the manifest's run fingerprint; the
   dataset's fingerprint equals the manifest's; each level's design re-hashes to the level
   fingerprint in the manifest, and each model's signals file carries that fingerprint and its
   own model index, for all S models;
4. the attacks, re-run on the submitted signals with the submitted config (the code path of
   ``harness attack``), give every submitted number again: each attack variant's TPR at every FPR,
   its CI and AUC, and each level's headline.

An accepted entry is written to ``site/entries/<entry_id>/`` (leaderboard/site.py) as unverified.
:func:`verify_entry` marks it verified when the board's maintainer re-ran the same defense and
config with a seed the submitter never saw (``harness evaluate DEFENSE --seed SECRET``) and the two
runs' 95% CIs of the sample-level headline TPR overlap.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import math
import tarfile
import tempfile
from pathlib import Path
from typing import Any

BUNDLE_LIMIT = 8 * 2**30  # bytes, all members together
REQUIRED_KEYS = ("defense", "preset", "dataset", "num_models", "audit_size", "seed", "harness_version",
                 "fingerprint", "headline_fpr", "config")
LEVEL_KEYS = ("canary", "test_accuracy", "attacks", "best", "num_guesses")
TOLERANCE = 1e-9


class SubmissionError(Exception):
    """A bundle or run that cannot be submitted or accepted; the message is one line (any line
    breaks of a library's message are folded)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _bundle_files(run_dir: Path, results: dict[str, Any]) -> list[str]:
    from harness.runstore import DamagedFileError, RunDir

    run = RunDir(run_dir)
    files = ["results.json", "manifest.json", "config.json", "data.npz"]
    s = int(results["num_models"])
    for level in run.levels():
        try:
            run.load_level(level)
        except DamagedFileError as e:
            raise SubmissionError(f"{e.path} is damaged: {e.reason}") from None
        for i in range(s):
            try:
                ok = run.read_signals(level, i) is not None
            except DamagedFileError as e:
                raise SubmissionError(f"{e.path} is damaged ({e.reason}); `harness evaluate --run-dir {run_dir}` "
                                      "retrains that model") from None
            if not ok:
                raise SubmissionError(f"{level} model {i} is not finished; finish the run "
                                      f"(`harness evaluate --run-dir {run_dir}`) before submitting")
        files += [str(run.level_dir(level).relative_to(run_dir) / "design.npz")]
        files += [str(run.signals_path(level, i).relative_to(run_dir)) for i in range(s)]
    missing = [f for f in files if not (run_dir / f).is_file()]
    if missing:
        raise SubmissionError(f"{run_dir / missing[0]} is missing")
    return files


def make_bundle(run_dir: Path, out: Path) -> dict[str, str]:
    """Write the submission bundle of a finished run to ``out`` (tar.gz); return its hash list."""
    path = run_dir / "results.json"
    if not path.is_file():
        raise SubmissionError(f"{path} does not exist: finish the run (and `harness attack {run_dir}`) first")
    try:
        results = json.loads(path.read_text())
        missing = [k for k in REQUIRED_KEYS if k not in results]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SubmissionError(f"{path} is not a results.json of this harness ({e})") from None
    files = _bundle_files(run_dir, results)
    hashes = {f: sha256_file(run_dir / f) for f in files}
    extra: dict[str, bytes] = {}
    if ".py:" in str(results["defense"]):  # a file plugin: its source travels with the numbers
        src = Path(str(results["defense"]).rsplit(":", 1)[0])
        if not src.is_file():
            raise SubmissionError(f"the defense's source file {src} is not found (run `harness submit` from the "
                                  "folder the run was started in)")
        name = f"defense_source/{src.name}"
        extra[name] = src.read_bytes()
        hashes[name] = hashlib.sha256(extra[name]).hexdigest()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for f in files:
            tar.add(run_dir / f, arcname=f, recursive=False)
        for name, data in {**extra, "hashes.json": json.dumps(hashes, indent=1, sort_keys=True).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashes


def _safe_extract(bundle: Path, dest: Path) -> None:
    try:
        tar = tarfile.open(bundle, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise SubmissionError(f"{bundle} is not a readable tar archive ({str(e).splitlines()[0]})") from None
    with tar:
        total = 0
        members = tar.getmembers()
        for m in members:
            p = Path(m.name)
            if p.is_absolute() or ".." in p.parts or not m.name:
                raise SubmissionError(f"unsafe path in bundle: {m.name!r}")
            if not (m.isfile() or m.isdir()):
                raise SubmissionError(f"bundle member {m.name!r} is not a regular file")
            total += m.size
            if total > BUNDLE_LIMIT:
                raise SubmissionError(f"bundle is larger than {BUNDLE_LIMIT // 2**30} GiB unpacked")
        try:
            tar.extractall(dest, members=members, filter="data")
        except TypeError:  # Python without extraction filters: the checks above stand in for it
            tar.extractall(dest, members=members)
        except (tarfile.TarError, OSError) as e:
            raise SubmissionError(f"bundle could not be extracted ({e})") from None


def _check_hashes(root: Path) -> None:
    f = root / "hashes.json"
    if not f.is_file():
        raise SubmissionError("bundle has no hashes.json")
    try:
        hashes = json.loads(f.read_text())
        assert isinstance(hashes, dict)
    except Exception:
        raise SubmissionError("hashes.json is not a JSON object") from None
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {"hashes.json"}
    unlisted = sorted(present - set(hashes))
    if unlisted:
        raise SubmissionError(f"{unlisted[0]} is in the bundle but not in hashes.json")
    for name, digest in sorted(hashes.items()):
        if name not in present:
            raise SubmissionError(f"{name} is listed in hashes.json but missing from the bundle")
        if sha256_file(root / name) != digest:
            raise SubmissionError(f"{name} hash mismatch: the file differs from the one hashes.json lists")


def _check_fingerprints(root: Path, results: dict[str, Any]) -> None:
    from harness.runstore import RunDir

    missing = [k for k in REQUIRED_KEYS if k not in results]
    levels_present = [lv for lv in ("population", "sample") if lv in results]
    if missing or not levels_present:
        raise SubmissionError(f"results.json lacks {', '.join(missing) or 'population/sample results'}")
    for lv in levels_present:
        absent = [k for k in LEVEL_KEYS if k not in results[lv]]
        if absent:
            raise SubmissionError(f"results.json {lv} lacks {', '.join(absent)}")
    run = RunDir(root)
    manifest = run.load_manifest()
    if manifest.get("fingerprint") != results["fingerprint"]:
        raise SubmissionError("results.json's run fingerprint differs from the manifest's")
    data = run.load_data()
    if manifest.get("data_fingerprint") not in (None, data.fingerprint()):
        raise SubmissionError("data.npz does not match the manifest's data fingerprint")
    s = int(results["num_models"])
    for level in run.levels():
        ld = run.load_level(level)
        if ld.fingerprint(manifest["fingerprint"]) != run.level_fingerprint(level):
            raise SubmissionError(f"{level}/design.npz does not match the level fingerprint in the manifest")
        for i in range(s):
            if run.read_signals(level, i) is None:
                raise SubmissionError(f"{run.signals_path(level, i).relative_to(root)} belongs to another design "
                                      "or model (its level fingerprint or model index differs)")


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= TOLERANCE
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else json.dumps(v)


def compare_numbers(claimed: dict[str, Any], recomputed: dict[str, Any]) -> str | None:
    """The first submitted number the re-run does not reproduce, as one line; None if all match."""
    for lv in ("population", "sample"):
        if (lv in claimed) != (lv in recomputed):
            return f"{lv}: present in only one of results.json and the re-run"
        if lv not in claimed:
            continue
        got = {(a["name"], a["variant"]): a for a in recomputed[lv]["attacks"]}
        for a in claimed[lv]["attacks"]:
            key = (a["name"], a["variant"])
            label = f"{lv}/{a['name']}:{a['variant']}"
            if key not in got:
                return f"{label} is in results.json but not in the re-run"
            r = got[key]
            for field in ("tpr_at_fpr", "tpr_ci"):
                for k, v in a[field].items():
                    if not _close(v, r[field].get(k)):
                        return f"{label} {field}[{k}] is {_fmt(v)} in results.json but {_fmt(r[field].get(k))} re-computed from the signals"
            if not _close(a["auc"], r["auc"]):
                return f"{label} auc is {_fmt(a['auc'])} in results.json but {_fmt(r['auc'])} re-computed from the signals"
        if len(got) != len(claimed[lv]["attacks"]):
            return f"{lv}: the re-run has attack variants results.json does not list"
        cb, rb = claimed[lv]["best"], recomputed[lv]["best"]
        for field in ("name", "variant", "tpr_at_fpr", "tpr_ci"):
            if not _close(cb.get(field), rb.get(field)):
                return f"{lv} headline {field} is {_fmt(cb.get(field))} in results.json but {_fmt(rb.get(field))} re-computed"
        if not _close(claimed[lv]["test_accuracy"]["mean"], recomputed[lv]["test_accuracy"]["mean"]):
            return f"{lv} test accuracy differs from the models' own records"
    return None


def verify_bundle(bundle: Path) -> tuple[dict[str, Any], str]:
    """Check ``bundle`` (module docstring); return (its results, the bundle's SHA-256) or raise
    :class:`SubmissionError` with the one-line reason."""
    from harness.evaluation import evaluate_run
    from harness.runstore import DamagedFileError, RunDir, RunDirError

    if not bundle.is_file():
        raise SubmissionError(f"{bundle} does not exist")
    with tempfile.TemporaryDirectory(prefix="harness-verify-") as tmp:
        root = Path(tmp)
        _safe_extract(bundle, root)
        _check_hashes(root)
        try:
            results = json.loads((root / "results.json").read_text())
            if not isinstance(results, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            raise SubmissionError(f"results.json is unreadable ({e})") from None
        try:
            _check_fingerprints(root, results)
            run = RunDir(root)
            cfg_path = root / "config.json"
            cfg = json.loads(cfg_path.read_text())
            if cfg != results["config"]:
                raise SubmissionError("config.json differs from the config in results.json")
            plugin = sorted((root / "defense_source").glob("*.py"))
            if ".py:" in str(cfg.get("defense", "")):  # re-point a file plugin at its bundled source
                if not plugin:
                    raise SubmissionError("a file-plugin defense needs its source file in the bundle")
                cfg["defense"] = f"{plugin[0]}:{str(cfg['defense']).rsplit(':', 1)[1]}"
                cfg_path.write_text(json.dumps(cfg))
            recomputed, _ = evaluate_run(run)
        except SubmissionError:
            raise
        except (DamagedFileError, RunDirError, KeyError, ValueError, TypeError) as e:
            raise SubmissionError(f"the bundle's run cannot be read ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''})") from None
        problem = compare_numbers(results, recomputed)
        if problem:
            raise SubmissionError(problem)
        return results, sha256_file(bundle)


def add_bundle(bundle: Path, site: Path) -> str:
    """Verify ``bundle`` and add it to ``site`` as an unverified submission; return its entry id."""
    from leaderboard.site import add_results, rebuild

    results, digest = verify_bundle(bundle)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "results.json"
        f.write_text(json.dumps(results, indent=2))
        eid = add_results(site, f, {"source": "submission", "verified": False, "verified_by": None,
                                    "submitted": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                    "bundle_sha256": digest})
    rebuild(site)
    return eid


def _headline(results: dict[str, Any]) -> tuple[float, tuple[float, float]]:
    lv = results["sample"] if "sample" in results else results["population"]
    k = repr(float(results.get("headline_fpr", 0.001)))
    return float(lv["best"]["tpr_at_fpr"][k]), tuple(lv["best"]["tpr_ci"][k])  # type: ignore[return-value]


def _comparable_config(cfg: dict[str, Any]) -> dict[str, Any]:
    c = json.loads(json.dumps(cfg))
    for key in ("seed", "run"):
        c.pop(key, None)
    c.get("data", {}).pop("path", None)
    return c


def verify_entry(site: Path, entry: str, rerun: Path) -> str:
    """Mark ``entry`` verified by the maintainer's re-run at ``rerun`` (module docstring); return the
    verified_by line, or raise :class:`SubmissionError`."""
    from leaderboard.site import rebuild

    d = site / "entries" / entry
    if not (d / "results.json").is_file():
        raise SubmissionError(f"no entry {entry!r} in {site / 'entries'}")
    f = rerun / "results.json" if rerun.is_dir() else rerun
    if not f.is_file():
        raise SubmissionError(f"{f} does not exist: finish the re-run first")
    mine, theirs = json.loads((d / "results.json").read_text()), json.loads(f.read_text())
    for key in ("defense", "preset", "dataset", "num_models", "audit_size"):
        if mine.get(key) != theirs.get(key):
            raise SubmissionError(f"the re-run's {key} is {theirs.get(key)!r}, the entry's {mine.get(key)!r}")
    if _comparable_config(mine["config"]) != _comparable_config(theirs["config"]):
        raise SubmissionError("the re-run's config differs from the entry's beyond the seed and run settings")
    if mine["seed"] == theirs["seed"]:
        raise SubmissionError("the re-run used the entry's own seed: verify with a seed the submitter never saw")
    (t1, ci1), (t2, ci2) = _headline(mine), _headline(theirs)
    if not (ci1[0] <= ci2[1] and ci2[0] <= ci1[1]):
        raise SubmissionError(f"the re-run's headline TPR {100 * t2:.1f}% [{100 * ci2[0]:.1f}, {100 * ci2[1]:.1f}] and the "
                              f"entry's {100 * t1:.1f}% [{100 * ci1[0]:.1f}, {100 * ci1[1]:.1f}] have disjoint 95% CIs")
    seed_tag = hashlib.sha256(str(theirs["seed"]).encode()).hexdigest()[:12]
    by = (f"re-run with an unseen seed (sha256 {seed_tag}): headline TPR {100 * t2:.1f}% "
          f"[{100 * ci2[0]:.1f}, {100 * ci2[1]:.1f}]")
    meta_file = d / "entry.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {"source": "run"}
    meta.update({"verified": True, "verified_by": by})
    meta_file.write_text(json.dumps(meta, indent=2))
    rebuild(site)
    return by
