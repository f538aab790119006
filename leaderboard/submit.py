"""Leaderboard submissions: bundle a finished run, and verify a bundle before it joins the site.

A bundle (``harness submit RUN_DIR -o entry.tar.gz``) holds what the attacks read and what the
numbers claim: ``results.json``, ``manifest.json``, ``config.json``, ``data.npz`` (the split the
models trained on), every level's ``design.npz`` (audit samples, membership masks, canaries) and
every model's signals file, ``hashes.json`` (SHA-256 of each of those files), and for a file-plugin
defense its source file (``defense_source/``). Saved models, ROC CSVs and progress files stay out.

``harness leaderboard add entry.tar.gz --site site/`` (:func:`verify_bundle`) refuses a bundle, with
one line saying why, unless:

1. it extracts safely (regular files only, no absolute or ``..`` paths, under the size and member
   limits; tarfile's ``data`` filter on top);
2. every file is listed in ``hashes.json`` with its hash, and every listed file is there;
3. results.json has the keys of docs/results-json.md and the manifest's run fingerprint, and its
   config describes config.json's models (the two may differ in attack and run settings only:
   results.json records the settings of its own numbers, and config.json holds the run's settings
   for its next attack phase, which an interrupted ``harness evaluate`` may have changed); the run
   fingerprint re-computed from config.json, data.npz and the
   defense's source equals the manifest's (when the bundle was trained with this harness version,
   the only case in which it can be re-computed); the dataset's fingerprint equals the manifest's;
   each level's design re-hashes to the level fingerprint in the manifest, and each model's
   signals file carries that fingerprint and its own model index, for all S models;
4. the attacks, re-run on the submitted signals with the config results.json records (the code
   path of ``harness attack``, whose bootstrap is seeded), give every submitted number again, to
   :data:`TOLERANCE`: each attack variant's TPR at every FPR, its CI and AUC in every experiment,
   each level's headline, and every other key of results.json except ``timings`` and
   ``harness_version``.

A file-plugin defense is imported (its code runs) to re-run the attacks, so such a bundle is only
accepted with ``trust_plugin`` (``--trust-plugin``), after reading its ``defense_source/``.

An accepted entry is written to ``site/entries/<entry_id>/`` (leaderboard/site.py) as unverified.
:func:`verify_entry` marks it verified when the board's maintainer re-ran the same defense and
config with a fresh seed the submitter never saw (``harness evaluate DEFENSE --seed SECRET``) and
the two sample-level leaks (the ranked figure) agree within both runs' errors, over victims and over
audit samples (:func:`harness.core.figure.runs_agree`: the re-run draws other canaries, which a run's own interval,
conditional on its canaries, does not cover).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import math
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

from harness.core import jsonio

BUNDLE_LIMIT = 8 * 2**30  # bytes, all members together
MAX_MEMBERS = 200_000  # files and folders in a bundle
REQUIRED_KEYS = ("defense", "preset", "dataset", "num_models", "audit_size", "seed", "harness_version",
                 "fingerprint", "headline_fpr", "config")
LEVEL_KEYS = ("canary", "test_accuracy", "attacks", "best", "num_guesses")
TOLERANCE = 1e-9  # re-computed numbers are bit-identical on one machine; this absorbs float rounding elsewhere
#: results.json keys the signals cannot reproduce: the machines (the one that re-runs the attacks is another)
UNCHECKED_KEYS = ("timings", "harness_version", "machine")


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


def _is_plugin(defense: Any) -> bool:
    from harness.core.registry import is_file_reference

    return is_file_reference(str(defense))


def _bundle_files(run_dir: Path, results: dict[str, Any]) -> list[str]:
    from harness.run.runstore import DamagedFileError, RunDir, RunDirError

    run = RunDir(run_dir)
    files = ["results.json", "manifest.json", "config.json", "data.npz"]
    s = int(results["num_models"])
    try:  # results.json is the run's (checked by the caller: RunDir.check_results)
        run.load_config()  # its training settings must be the models' (RunDir.check_config)
        levels = run.levels()
    except DamagedFileError as e:
        raise SubmissionError(f"{e.path} is damaged: {e.reason}") from None
    except RunDirError as e:
        raise SubmissionError(str(e)) from None
    for level in levels:
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


def make_bundle(run_dir: Path, out: Path, wait: bool = False) -> dict[str, str]:
    """Write the submission bundle of a finished run to ``out`` (tar.gz); return its hash list.

    The run is read under its shared lock (harness.run.runlock: no writer changes it meanwhile;
    ``wait`` waits for one instead of refusing), after finishing an interrupted commit of its
    results; a run directory this process cannot write (an archived run) is read as it is.
    Refuses (:class:`SubmissionError`) a run without results.json, with an unfinished model or a
    damaged file, or a file plugin whose source is not found or changed since the run.

    ``out`` is replaced only once the whole bundle is written (:func:`_write_tar_atomic`): a failed
    or interrupted write (a full disk, Ctrl-C) leaves an existing ``out`` as it was and no temp file."""
    from harness.core.errors import ConfigError
    from harness.run.runlock import RunLock
    from harness.run.runstore import COMMIT_JOURNAL, RunDir

    path = run_dir / "results.json"
    if not path.is_file():
        raise SubmissionError(f"{path} does not exist: finish the run (and `harness attack {run_dir}`) first")
    if out.is_dir():
        raise SubmissionError(f"-o {out} is a folder; name the bundle file to write (e.g. {out / 'entry.tar.gz'})")
    try:
        lock = RunLock(run_dir, shared=True, wait=wait).acquire()
    except ConfigError as e:  # another process is writing the run
        raise SubmissionError(str(e)) from None
    try:
        if not lock.read_only:
            RunDir(run_dir).recover()
        elif (run_dir / COMMIT_JOURNAL).is_file():  # an archived run is read as it is, unless half-committed
            raise SubmissionError(f"{run_dir} holds an interrupted attack phase's uncommitted results "
                                  f"({COMMIT_JOURNAL}) and is read-only here; `harness report {run_dir}` where it "
                                  "is writable finishes them, then submit")
        return _write_bundle(run_dir, out, path)
    finally:
        lock.release()


def _write_bundle(run_dir: Path, out: Path, path: Path) -> dict[str, str]:
    try:
        results = jsonio.loads(path.read_text())
        if not isinstance(results, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in REQUIRED_KEYS if k not in results]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SubmissionError(f"{path} is not a results.json of this harness ({e})") from None
    from harness.run.runstore import RunDir, RunDirError

    try:
        RunDir(run_dir).check_results(results, path)  # edited since the attack phase wrote it, or another run's
    except RunDirError as e:
        raise SubmissionError(str(e)) from None
    files = _bundle_files(run_dir, results)
    hashes = {f: sha256_file(run_dir / f) for f in files}
    extra: dict[str, bytes] = {}
    if _is_plugin(results["defense"]):  # a file plugin: its source travels with the numbers
        src = Path(str(results["defense"]).rsplit(":", 1)[0]).expanduser()
        if not src.is_file():
            raise SubmissionError(f"the defense's source file {src} is not found (run `harness submit` from the "
                                  "folder the run was started in)")
        _check_plugin_source(run_dir, results)
        name = f"defense_source/{src.name}"
        extra[name] = src.read_bytes()
        hashes[name] = hashlib.sha256(extra[name]).hexdigest()
    members = {**extra, "hashes.json": json.dumps(hashes, indent=1, sort_keys=True).encode()}
    try:
        _write_tar_atomic(out, [(run_dir / f, f) for f in files], members)
    except OSError as e:
        raise SubmissionError(f"cannot write {out}: {e.strerror or e}") from None
    return hashes


def _write_tar_atomic(out: Path, files: list[tuple[Path, str]], members: dict[str, bytes]) -> None:
    """Write a tar.gz of ``files`` ((path, name in the archive)) and then ``members`` (name -> bytes)
    to ``out``, all or nothing (runstore.atomic_write_with: a temp file beside ``out``, fsynced,
    renamed over it; on any exception, a full disk or Ctrl-C, an existing ``out`` is as before)."""
    from harness.run.runstore import atomic_write_with

    def write(raw: BinaryIO) -> None:
        # named after ``out``: the gzip header records that name, not the temp file's
        with tarfile.open(name=str(out), mode="w:gz", fileobj=raw) as tar:
            for path, arcname in files:
                tar.add(path, arcname=arcname, recursive=False)
            for arcname, data in members.items():
                info = tarfile.TarInfo(arcname)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    atomic_write_with(out, write)


def _check_plugin_source(run_dir: Path, results: dict[str, Any]) -> None:
    """The plugin file as it is now must be the one the run trained with (same run fingerprint)."""
    from harness.core.version import MODELS_VERSION, models_version_of
    from harness.run.runstore import RunDir

    run = RunDir(run_dir)
    if models_version_of(run.load_manifest()) != MODELS_VERSION:
        return  # trained by another version: the fingerprint cannot be re-computed here
    try:
        fp = run_fingerprint_of(run.load_config(), run.load_data())
    except ValueError as e:  # the plugin no longer imports, or a damaged file
        raise SubmissionError(" ".join(str(e).split())) from None
    if fp != results["fingerprint"]:
        raise SubmissionError(f"the defense's source file {str(results['defense']).rsplit(':', 1)[0]} changed since "
                              "the run trained with it (the run fingerprint differs); re-run the evaluation")


def _safe_extract(bundle: Path, dest: Path) -> None:
    """Extract ``bundle`` into ``dest``, refusing anything but regular files and folders below it.
    Headers are checked one by one, so a limit stops the scan before the rest is decompressed."""
    try:
        tar = tarfile.open(bundle, "r:*")
    except (tarfile.TarError, OSError) as e:
        raise SubmissionError(f"{bundle} is not a readable tar archive ({str(e).splitlines()[0]})") from None
    with tar:
        total = 0
        members: list[tarfile.TarInfo] = []
        try:
            for m in tar:
                p = Path(m.name)
                if p.is_absolute() or ".." in p.parts or not m.name or p == Path("."):
                    raise SubmissionError(f"unsafe path in bundle: {m.name!r}")
                if not (m.isfile() or m.isdir()):
                    kind = "a symlink" if m.issym() else "a hard link" if m.islnk() else "not a regular file"
                    raise SubmissionError(f"bundle member {m.name!r} is {kind}")
                total += m.size
                if total > BUNDLE_LIMIT:
                    raise SubmissionError(f"bundle is larger than {BUNDLE_LIMIT // 2**30} GiB unpacked")
                members.append(m)
                if len(members) > MAX_MEMBERS:
                    raise SubmissionError(f"bundle has more than {MAX_MEMBERS} members")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise SubmissionError(f"{bundle} is a damaged tar archive ({type(e).__name__}: {e})") from None
        try:
            tar.extractall(dest, members=members, filter="data")
        except TypeError:  # Python without extraction filters: the checks above stand in for it
            tar.extractall(dest, members=members)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise SubmissionError(f"bundle could not be extracted ({type(e).__name__}: {e})") from None


def _check_hashes(root: Path) -> None:
    f = root / "hashes.json"
    if not f.is_file():
        raise SubmissionError("bundle has no hashes.json")
    try:
        hashes = json.loads(f.read_text())
        if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
            raise ValueError
    except (OSError, UnicodeDecodeError, ValueError):
        raise SubmissionError("hashes.json is not a JSON object of path -> SHA-256") from None
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {"hashes.json"}
    unlisted = sorted(present - set(hashes))
    if unlisted:
        raise SubmissionError(f"{unlisted[0]} is in the bundle but not in hashes.json")
    for name, digest in sorted(hashes.items()):
        if name not in present:
            raise SubmissionError(f"{name} is listed in hashes.json but missing from the bundle")
        if sha256_file(root / name) != digest:
            raise SubmissionError(f"{name} hash mismatch: the file differs from the one hashes.json lists")


def _read_results(root: Path) -> dict[str, Any]:
    """results.json with the keys of docs/results-json.md, whose config is config.json's."""
    try:
        results = jsonio.loads((root / "results.json").read_text())
        cfg = jsonio.loads((root / "config.json").read_text())
        if not isinstance(results, dict):
            raise ValueError("results.json is not a JSON object")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SubmissionError(f"results.json or config.json is unreadable ({e})") from None
    missing = [k for k in REQUIRED_KEYS if k not in results]
    levels_present = [lv for lv in ("population", "sample") if lv in results]
    if missing or not levels_present:
        raise SubmissionError(f"results.json lacks {', '.join(missing) or 'population/sample results'}")
    for lv in levels_present:
        absent = [k for k in LEVEL_KEYS if not isinstance(results[lv], dict) or k not in results[lv]]
        if absent:
            raise SubmissionError(f"results.json {lv} lacks {', '.join(absent)}")
    if not isinstance(cfg, dict) or cfg.get("defense") != results["defense"] or \
            not isinstance(results["config"], dict) or results["config"].get("defense") != results["defense"]:
        raise SubmissionError(f"results.json names the defense {results['defense']!r} but config.json "
                              f"{cfg.get('defense') if isinstance(cfg, dict) else None!r}")
    if cfg != results["config"] and _models_of(cfg) != _models_of(results["config"]):
        raise SubmissionError("config.json and the config in results.json describe different models (they may "
                              "differ in attack and run settings only: results.json records the ones its numbers "
                              "were computed with)")
    return results


def _models_of(raw: Any) -> Any:
    """The model-determining part of a raw config (ExperimentConfig.model_determining); a config
    that does not validate is compared as it is."""
    from harness.core.config import ConfigError, validate_config

    try:
        return validate_config(raw).model_determining()
    except ConfigError:
        return raw


def _point_plugin_at_bundle(root: Path, bundle: Path, defense: str, trust_plugin: bool) -> str:
    """Re-point a file-plugin defense in config.json at its bundled source, if the caller trusts it;
    return the new reference."""
    plugin = sorted((root / "defense_source").glob("*.py"))
    if not plugin:
        raise SubmissionError("a file-plugin defense needs its source file in the bundle (defense_source/)")
    rel = plugin[0].relative_to(root).as_posix()
    if not trust_plugin:
        raise SubmissionError(f"the defense is a file plugin: re-running its attacks imports (runs) {rel} from the "
                              f"bundle; read it (`tar -xOzf {bundle} {rel}`) and pass --trust-plugin")
    cfg_path = root / "config.json"
    cfg = jsonio.loads(cfg_path.read_text())
    cfg["defense"] = f"{plugin[0]}:{defense.rsplit(':', 1)[1]}"
    cfg_path.write_text(jsonio.dumps(cfg))
    return str(cfg["defense"])


def run_fingerprint_of(cfg: Any, data: Any, plugin_copy: str | None = None) -> str:
    """:func:`harness.run.runner.run_fingerprint` of ``cfg``; for a file plugin, with its code read from
    ``plugin_copy`` (``path.py:ClassName`` of the bundled source) while the config keeps the path
    the run was started with, which the fingerprint also hashes. Tested equal to the runner's."""
    from harness.core.registry import source_fingerprint
    from harness.plugins import resolve
    from harness.run.fingerprint import hash_trained, run_fingerprint

    if plugin_copy is None:
        return run_fingerprint(cfg, data)
    config = cfg.model_determining()
    for name in getattr(resolve("defenses", plugin_copy), "plumbing_params", ()):
        config["defense_params"].pop(name, None)
    return hash_trained(config, data.fingerprint(), source_fingerprint(plugin_copy))


def _check_fingerprints(root: Path, results: dict[str, Any], plugin_copy: str | None) -> None:
    """Run fingerprint (re-computed where possible), data, designs and every model's signals."""
    from harness.core.version import MODELS_VERSION, models_version_of
    from harness.core.config import validate_config
    from harness.run.runstore import RunDir

    run = RunDir(root)
    manifest = run.load_manifest()
    if manifest.get("fingerprint") != results["fingerprint"]:
        raise SubmissionError("results.json's run fingerprint differs from the manifest's")
    data = run.load_data()
    if manifest.get("data_fingerprint") not in (None, data.fingerprint()):
        raise SubmissionError("data.npz does not match the manifest's data fingerprint")
    if models_version_of(manifest) == MODELS_VERSION:  # else the fingerprint hashes another version's code
        fp = run_fingerprint_of(validate_config(results["config"]), data, plugin_copy)
        if fp != manifest["fingerprint"]:
            raise SubmissionError(f"the run fingerprint re-computed from config.json, data.npz and the defense "
                                  f"({fp[:12]}) differs from the manifest's ({str(manifest['fingerprint'])[:12]})")
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
    """Equal JSON values, numbers to :data:`TOLERANCE`: equal infinities are equal (their difference
    is NaN), and so are two NaNs (a CI without bootstrap replicates)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= TOLERANCE
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def _fmt(v: Any, digits: int = 4) -> str:
    text = f"{v:.{digits}g}" if isinstance(v, float) else json.dumps(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _differ(claimed: Any, recomputed: Any) -> str:
    """'is A in results.json but B re-computed from the signals', with enough digits to tell A from B."""
    for digits in (4, 8, 17):
        a, b = _fmt(claimed, digits), _fmt(recomputed, digits)
        if a != b:
            break
    return f"is {a} in results.json but {b} re-computed from the signals"


def _is_number(key: str) -> bool:
    try:
        float(key)
    except ValueError:
        return False
    return True


def _first_difference(claimed: Any, recomputed: Any, path: str) -> str | None:
    """The first place where two JSON values differ (beyond :data:`TOLERANCE`), as one line."""
    if isinstance(claimed, dict) and isinstance(recomputed, dict):
        for k in claimed:
            if k not in recomputed:
                return f"{path}.{k} is in results.json but the re-run does not write it"
        for k in recomputed:
            if k not in claimed:
                return f"{path}.{k} is missing from results.json"
        for k in claimed:
            problem = _first_difference(claimed[k], recomputed[k], f"{path}[{k}]" if _is_number(k) else f"{path}.{k}")
            if problem:
                return problem
        return None
    if isinstance(claimed, list) and isinstance(recomputed, list) and len(claimed) == len(recomputed):
        for i, (a, b) in enumerate(zip(claimed, recomputed)):
            label = f"{a['name']}:{a['variant']}" if isinstance(a, dict) and {"name", "variant"} <= a.keys() else i
            problem = _first_difference(a, b, f"{path}[{label}]")
            if problem:
                return problem
        return None
    return None if _close(claimed, recomputed) else f"{path} {_differ(claimed, recomputed)}"


def _experiments(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, level object) for the population level, the sample headline and every canary."""
    out = [(lv, results[lv]) for lv in ("population", "sample") if isinstance(results.get(lv), dict)]
    by_canary = results.get("sample_by_canary")
    if isinstance(by_canary, dict):
        out += [(f"sample-{c}", r) for c, r in by_canary.items() if isinstance(r, dict)]
    return out


def compare_numbers(claimed: dict[str, Any], recomputed: dict[str, Any]) -> str | None:
    """The first submitted number the re-run does not reproduce, as one line; None if all match.

    Attack variants are compared first (each TPR, CI and AUC, named by experiment, attack and FPR),
    then each level's headline and test accuracy, then every other key except :data:`UNCHECKED_KEYS`."""
    mine = dict(_experiments(recomputed))
    for lv, level in _experiments(claimed):
        if lv not in mine:
            return f"{lv}: present in results.json but not in the re-run"
        got = {(a["name"], a["variant"]): a for a in mine[lv]["attacks"]}
        for a in level["attacks"]:
            key = (a["name"], a["variant"])
            label = f"{lv}/{a['name']}:{a['variant']}"
            if key not in got:
                return f"{label} is in results.json but not in the re-run"
            r = got[key]
            for field in ("tpr_at_fpr", "tpr_ci"):
                for k, v in a[field].items():
                    if not _close(v, r[field].get(k)):
                        return f"{label} {field}[{k}] {_differ(v, r[field].get(k))}"
            if not _close(a["auc"], r["auc"]):
                return f"{label} auc {_differ(a['auc'], r['auc'])}"
        if len(got) != len(level["attacks"]):
            return f"{lv}: the re-run has attack variants results.json does not list"
        cb, rb = level["best"], mine[lv]["best"]
        for field in ("name", "variant", "tpr_at_fpr", "tpr_ci"):
            problem = _first_difference(cb.get(field), rb.get(field), f"{lv} headline {field}")
            if problem:
                return problem
        if not _close(level["test_accuracy"]["mean"], mine[lv]["test_accuracy"]["mean"]):
            return f"{lv} test accuracy differs from the models' own records"
    for lv in mine:
        if lv not in dict(_experiments(claimed)):
            return f"{lv}: present in the re-run but not in results.json"
    rest = {k: v for k, v in claimed.items() if k not in UNCHECKED_KEYS}
    again = {k: v for k, v in recomputed.items() if k not in UNCHECKED_KEYS}
    problem = _first_difference(rest, again, "results")
    return problem.removeprefix("results.") if problem else None


def verify_bundle(bundle: Path, trust_plugin: bool = False) -> tuple[dict[str, Any], str]:
    """Check ``bundle`` (module docstring); return (its results, the bundle's SHA-256) or raise
    :class:`SubmissionError` with the one-line reason. ``trust_plugin`` allows importing a
    file-plugin defense's bundled source."""
    from harness.core.version import __version__
    from harness.audit.attack_phase import evaluate_run
    from harness.run.runstore import DamagedFileError, RunDir

    if not bundle.is_file():
        raise SubmissionError(f"{bundle} does not exist")
    with tempfile.TemporaryDirectory(prefix="harness-verify-") as tmp:
        root = Path(tmp)
        _safe_extract(bundle, root)
        _check_hashes(root)
        results = _read_results(root)
        defense = str(results["defense"])
        try:
            plugin_copy = _point_plugin_at_bundle(root, bundle, defense, trust_plugin) if _is_plugin(defense) else None
            _check_fingerprints(root, results, plugin_copy)
        except DamagedFileError as e:
            raise SubmissionError(f"{_rel(e.path, root)} in the bundle is unreadable ({e.reason})") from None
        except (ValueError, KeyError, TypeError) as e:  # ConfigError, RunDirError, a plugin that fails to load
            raise SubmissionError(f"the bundle's run cannot be read ({_one_line(e, root)})") from None
        try:  # with the configuration results.json records (its attack settings are those of its numbers)
            from harness.core.config import validate_config

            cfg = validate_config({**results["config"], "defense": plugin_copy or defense})
            recomputed, _ = evaluate_run(RunDir(root), cfg=cfg)
        except Exception as e:  # whatever the submitted files make the attacks raise refuses the bundle
            raise SubmissionError(f"re-running the attacks failed ({_one_line(e, root)})") from None
        recomputed["defense"] = defense  # the plugin's path as submitted, not the temporary copy's
        recomputed["config"]["defense"] = defense
        if "defense_name" not in results:  # a results.json from before the key: nothing to compare
            recomputed.pop("defense_name", None)
    try:
        problem = compare_numbers(results, recomputed)
    except (KeyError, TypeError, AttributeError) as e:
        raise SubmissionError(f"results.json is malformed ({type(e).__name__}: {e})") from None
    if problem:
        if results.get("harness_version") != __version__:
            problem += f" (results.json was written by harness {results.get('harness_version')}, this is {__version__})"
        raise SubmissionError(problem)
    return results, sha256_file(bundle)


def _rel(path: Path, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _one_line(e: BaseException, root: Path) -> str:
    """``Type: message``, on one line, with the temporary folder's path left out."""
    text = str(e).replace(str(root) + "/", "").replace(str(root), "the bundle")
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def already_added(site: Path, digest: str) -> tuple[str, dict[str, Any]] | None:
    """(entry id, entry.json) of the site's entry added from the bundle of SHA-256 ``digest``, or None."""
    for meta_file in sorted((site / "entries").glob("*/entry.json")):
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("bundle_sha256") == digest and \
                (meta_file.parent / "results.json").is_file():
            return meta_file.parent.name, meta
    return None


def add_bundle(bundle: Path, site: Path, trust_plugin: bool = False) -> tuple[str, bool]:
    """Verify ``bundle`` and add it to ``site`` as an unverified submission; return (its entry id,
    whether it was added): a bundle the site already holds (the same SHA-256) is left as it was,
    its submission time included. Nothing in ``site`` changes when the bundle is refused: one whose
    numbers the signals do not reproduce (:func:`verify_bundle`), or whose run failed the checks of
    its outputs (leaderboard.build.refusal: degenerate outputs, a model at chance accuracy, outputs
    that do not fit the design's membership unless imported with ``--force``)."""
    from leaderboard.build import refusal
    from leaderboard.site import add_results, rebuild

    if bundle.is_file() and (known := already_added(site, sha256_file(bundle))) is not None:
        return known[0], False
    results, digest = verify_bundle(bundle, trust_plugin)
    why = refusal(results)
    if why:
        raise SubmissionError(why)
    meta = {"source": "submission", "verified": False, "verified_by": None,
            "submitted": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "bundle_sha256": digest}
    if results.get("provenance") == "external":  # models trained outside the harness: nothing to re-train
        meta["trained_outside"] = True
        meta["checked"] = "attacks re-run on the submitted outputs (the training cannot be re-run)"
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "results.json"
        f.write_text(jsonio.dumps(results, indent=2))
        eid = add_results(site, f, meta)
    rebuild(site)
    return eid, True


def _leak(results: dict[str, Any]) -> tuple[float, float, float]:
    """(point, standard error over victims, standard error over audit samples) of the ranked figure:
    the sample level's leak (the population level's where there is no sample level);
    SubmissionError where the level has none or was attacked before the standard errors were recorded."""
    lv = results["sample"] if "sample" in results else results["population"]
    leak = (lv.get("figure") or {}).get("leak")
    if not leak or leak.get("lower") is None:
        raise SubmissionError("the run has no ranked figure (its level resolves no FPR with 3 expected false positives, "
                              "or it ran without a bootstrap)")
    if leak.get("se") is None or leak.get("se_audit") is None:
        raise SubmissionError("the run's leak records no standard errors (attacked before harness 0.5, or with fewer "
                              "than 20 audit samples): re-run `harness attack RUN_DIR` first")
    return float(leak["tpr"]), float(leak["se"]), float(leak["se_audit"])


def _comparable_config(cfg: dict[str, Any]) -> dict[str, Any]:
    c = json.loads(json.dumps(cfg))
    for key in ("seed", "run"):
        c.pop(key, None)
    c.get("data", {}).pop("path", None)
    return c


def seed_tag(seed: Any) -> str:
    """What ``verified_by`` records of the maintainer's seed: 12 hex digits of its SHA-256."""
    return hashlib.sha256(str(seed).encode()).hexdigest()[:12]


def _read_json(path: Path, what: str) -> dict[str, Any]:
    from leaderboard.build import read_json_object

    try:
        return read_json_object(path)
    except ValueError as e:
        raise SubmissionError(f"{what} {path} is unreadable ({e})") from None


def verify_entry(site: Path, entry: str, rerun: Path) -> str:
    """Mark ``entry`` verified by the maintainer's re-run at ``rerun`` (module docstring); return the
    verified_by line, or raise :class:`SubmissionError`.

    The re-run must have the entry's defense, preset, dataset, S and C, the same config apart from
    the seed, ``run.*`` and the data path, a seed other than the entry's and than any seed that
    verified another entry of the site, and a sample-level leak that agrees with the entry's
    (:func:`harness.core.figure.runs_agree`)."""
    from harness.run.runstore import atomic_write_bytes
    from leaderboard.site import rebuild

    d = site / "entries" / entry
    if not entry or Path(entry).name != entry or not (d / "results.json").is_file():
        raise SubmissionError(f"no entry {entry!r} in {site / 'entries'}")
    mine = _read_json(d / "results.json", "the entry's")
    if mine.get("provenance") == "external":
        raise SubmissionError(f"{entry}'s models were trained outside the harness: their training cannot be re-run "
                              "with an unseen seed; `leaderboard add` verified it by re-running its attacks on the "
                              "submitted outputs, which is all a board can check")
    f = rerun / "results.json" if rerun.is_dir() else rerun
    if not f.is_file():
        raise SubmissionError(f"{f} does not exist: finish the re-run first")
    from leaderboard.build import public_results

    # the site publishes results.json with every absolute path cut to its last part (leaderboard.site):
    # the re-run is compared in the same form, so a plugin re-run from another folder still matches
    mine, theirs = (public_results(_read_json(d / "results.json", "the entry's")),
                    public_results(_read_json(f, "the re-run's")))
    for key in ("defense", "preset", "dataset", "num_models", "audit_size", "headline_fpr"):
        if mine.get(key) != theirs.get(key):
            raise SubmissionError(f"the re-run's {key} is {theirs.get(key)!r}, the entry's {mine.get(key)!r}")
    if ("sample" in mine) != ("sample" in theirs):
        raise SubmissionError("the re-run and the entry do not both have a sample level")
    if _comparable_config(mine.get("config", {})) != _comparable_config(theirs.get("config", {})):
        raise SubmissionError("the re-run's config differs from the entry's beyond the seed and run settings")
    if mine["seed"] == theirs["seed"]:
        raise SubmissionError("the re-run used the entry's own seed: verify with a seed the submitter never saw")
    tag = seed_tag(theirs["seed"])
    for other in sorted((site / "entries").glob("*/entry.json")):
        if other.parent.name != entry and f"sha256 {tag}" in str(_read_json(other, "entry").get("verified_by")):
            raise SubmissionError(f"this seed already verified {other.parent.name}: use a fresh secret seed per entry")
    from harness.core.figure import VERIFY_ALPHA, runs_agree

    first, second = _leak(mine), _leak(theirs)
    agree, z = runs_agree(first, second)
    t1, t2 = first[0], second[0]
    if not agree:
        raise SubmissionError(f"the re-run's leak {100 * t2:.1f}% and the entry's {100 * t1:.1f}% disagree (z = {z:.2f} "
                              f"with both runs' errors over victims and audit samples; two-sided {VERIFY_ALPHA:g})")
    by = f"re-run with an unseen seed (sha256 {tag}): leak {100 * t2:.1f}% (z = {z:+.2f})"
    meta_file = d / "entry.json"
    meta = _read_json(meta_file, "entry") if meta_file.is_file() else {"source": "run"}
    meta.update({"verified": True, "verified_by": by})
    atomic_write_bytes(meta_file, json.dumps(meta, indent=2).encode())  # a failure leaves entry.json as it was
    rebuild(site)
    return by
