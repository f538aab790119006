"""The run directory: everything a run needs to resume, re-attack and report.

```
RUN_DIR/
  config.json               the resolved configuration
  manifest.json             harness version, run fingerprint, data fingerprint, per-experiment fingerprints,
                            the fingerprinted config (trained_config), results.json's digest (results_digest)
  data.npz                  the dataset exactly as used (uint8 images, labels, normalization)
  <experiment>/design.npz   audit indices, membership (S x C), canary images/labels, evaluated mask
  <experiment>/signals/model_0007.npz   one file per finished model (temp name, then renamed)
  <experiment>/models/model_0007.pt     the served model's torch state (only with run.save_models)
  results.json, table.csv, roc/<experiment>__<attack>__<variant>.csv
```

Experiments are ``population`` (audit samples as they are) and ``sample-<canary>`` (one per
sample-level canary); the code calls an experiment's name its "level".

A signals file counts as finished only once renamed into place *and* only if the level fingerprint
stored inside it matches the level's; anything else is never read as a finished model. A saved
model (``--save-models``) follows the same rules: written atomically before its signals file, and
read back only when its stored level fingerprint and index match.

Damaged files (truncated, corrupt, not what they claim to be, a signals file holding a NaN)
raise :class:`DamagedFileError`, which names the file and the command that repairs it.
``harness evaluate`` repairs them itself: a damaged signals file is moved aside as
``model_0007.npz.damaged`` and that model retrained
(:meth:`RunDir.quarantine_damaged`); a damaged ``manifest.json``, ``config.json``, ``data.npz``
or ``design.npz`` is moved aside and rebuilt from the command's config (:attr:`RunDir.healed`
lists what was repaired). Finished models stay: each is checked against the rebuilt level
fingerprints.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from canaries.base import Canaries
from harness.core import jsonio
from harness.core.config import ConfigError, ExperimentConfig, validate_config
from harness.core.atomic import atomic_write_bytes, atomic_write_with  # noqa: F401 (atomic_write_with: imported from here)
from harness.core.atomic import temp_file as _temp_file
from harness.core.data import ImageDataset
from harness.core.design import AuditDesign
from harness.run.fingerprint import sha256_json  # noqa: F401 (imported from here too)

class RunDirError(ConfigError):
    """The run directory cannot be used (fingerprint mismatch, missing files, not a run)."""


class DamagedFileError(RunDirError):
    """A file of a run directory exists but cannot be read; the message names the repair."""

    def __init__(self, path: Path, reason: str, repair: str) -> None:
        super().__init__(f"{path} is damaged ({reason}); {repair}")
        self.path = path
        self.reason = reason


def _reason(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    if len(text) > 100:
        text = text[:97] + "..."
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _signals_meta(z: Any) -> dict[str, Any]:
    """The metadata of an open signals npz (its ``meta`` entry, a JSON object); ValueError otherwise."""
    meta = json.loads(str(z["meta"]))
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not a JSON object")
    return meta


def move_aside(path: Path) -> Path:
    """Rename a damaged file to ``<name>.damaged`` (``.damaged.2``, ... if taken); return the new path."""
    target = path.with_name(path.name + ".damaged")
    k = 2
    while target.exists():
        target = path.with_name(f"{path.name}.damaged.{k}")
        k += 1
    os.replace(path, target)
    return target


def _nan_count(a: np.ndarray) -> int:
    """NaN entries of a floating array; for float16 (the signals' usual dtype) from the bits, its
    exponent all ones and its fraction not zero (numpy's isnan converts every float16 one at a
    time: twice as slow)."""
    if a.dtype == np.float16:
        return int(np.count_nonzero((a.view(np.uint16) & 0x7FFF) > 0x7C00))
    return int(np.isnan(a).sum())


def sha256_arrays(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def results_digest(results: dict[str, Any]) -> str:
    """SHA-256 of results.json's content: its values as canonical JSON (sorted keys, non-finite
    numbers as strings), so any edited number or key changes it and a re-formatted file (or an
    older one's bare ``Infinity``) does not. The attack phase records it in manifest.json in the
    commit that writes results.json (harness.audit.report.write_outputs)."""
    return sha256_json(json.loads(jsonio.dumps(results)))  # as written: keys as strings, "Infinity" as a string


def changed_keys(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) of every leaf where two JSON objects differ (a key only
    one of them has: None on the other side)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(set(old) | set(new), key=str)
                for c in changed_keys(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k))]
    return [] if old == new else [(prefix, old, new)]


COMMIT_JOURNAL = ".commit.json"


def commit_files(root: Path, files: dict[str, bytes], remove: list[str] | None = None) -> None:
    """Replace several files under ``root`` (relative paths -> contents), and delete the ``remove``
    ones, as one change: every new file is written to a temp file first; then a journal listing the
    renames and deletions is written atomically (the commit point); then they are done and the
    journal removed. Interrupted before the commit point, nothing has changed (the temps are
    removed); after it, :func:`recover_commit` finishes them, so a reader never sees some files new
    and others old for long, and the next command sees all of them new."""
    root = Path(os.path.abspath(root))  # normalized (no ``..``), as the temp files' paths are
    temps: list[tuple[Path, Path]] = []
    try:
        for rel, data in files.items():
            final = root / rel
            temps.append((_temp_file(final, lambda f, data=data: f.write(data)), final))
        atomic_write_json(root / COMMIT_JOURNAL, {"moves": [[str(t.relative_to(root)), str(f.relative_to(root))]
                                                            for t, f in temps],
                                                  "removes": [str(r) for r in remove or []]})
    except BaseException:
        for t, _ in temps:
            t.unlink(missing_ok=True)
        raise
    recover_commit(root)


def recover_commit(root: Path) -> bool:
    """Finish a commit whose journal is in ``root`` (its renames; idempotent) and remove the temp
    files of commits that never reached their commit point; True when a commit was finished."""
    journal = root / COMMIT_JOURNAL
    finished = False
    if journal.is_file():
        try:
            entry = json.loads(journal.read_text())
            moves, removes = entry["moves"], entry.get("removes", [])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            moves = None  # written atomically, so unreadable means not ours: set aside below
        if moves is None:
            move_aside(journal)
        else:
            for tmp, final in moves:
                if (root / tmp).is_file():
                    os.replace(root / tmp, root / final)
            for rel in removes:
                (root / rel).unlink(missing_ok=True)
            journal.unlink(missing_ok=True)
            finished = True
    for folder in (root, root / "roc"):
        if folder.is_dir():
            for t in folder.glob(".*.tmp"):
                t.unlink(missing_ok=True)
    return finished


def atomic_write_json(path: Path, obj: Any) -> None:
    """``obj`` as valid JSON (non-finite numbers as strings: harness.core.jsonio), written atomically."""
    atomic_write_bytes(path, (jsonio.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def atomic_write_npz(path: Path, **arrays: np.ndarray) -> None:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    atomic_write_bytes(path, buf.getvalue())


class ArrayCache:
    """Arrays kept between runs under a key, as ``<root>/<key>.npy`` written atomically (the
    near-duplicates canaries' embeddings of a dataset: ``<run.out>/.cache``). A file that cannot be
    read is treated as absent and rewritten."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def where(self, key: str) -> str:
        return str(self.root / f"{key}.npy")

    def load(self, key: str) -> np.ndarray | None:
        path = self.root / f"{key}.npy"
        if not path.is_file():
            return None
        try:
            return np.load(path, allow_pickle=False)
        except Exception:  # damaged: computed again and rewritten
            return None

    def save(self, key: str, array: np.ndarray) -> None:
        import io

        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        atomic_write_bytes(self.root / f"{key}.npy", buf.getvalue())


@dataclass(frozen=True)
class LevelDesign:
    """One level's experiment: the shared audit design plus the canaries of this level.

    ``population_indices`` are the test images every model is also queried on (RMIA's population
    samples z; empty when ``audit.population_samples`` is 0); ``canary_info`` is what the generator
    recorded (e.g. the OOD source)."""

    level: str
    canary: str
    design: AuditDesign
    canaries: Canaries
    population_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    canary_info: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self, run_fingerprint: str) -> str:
        c = self.canaries
        return sha256_json(
            {
                "run": run_fingerprint,
                "level": self.level,
                "canary": self.canary,
                "arrays": sha256_arrays(
                    self.design.audit_indices, self.design.membership, c.x, c.y, c.evaluated, c.extra_x, c.extra_y,
                    self.population_indices, *([c.neighbour_x] if c.has_neighbours else []),
                ),  # canaries without neighbours keep the fingerprints they had before the field
            }
        )


@dataclass(frozen=True)
class ModelSignals:
    """What one trained model left behind: its signals and its metadata."""

    index: int
    arrays: dict[str, np.ndarray]  # e.g. "logits": (C, A, K) float32
    meta: dict[str, Any]


class RunDir:
    """Read and write one run directory."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        #: what :meth:`init` / :meth:`save_level` repaired (one line each), for the caller to print
        self.healed: list[str] = []

    def repair_hint(self, config_damaged: bool = False) -> str:
        """The command that rebuilds a damaged file; without a readable config.json, the original one."""
        if config_damaged:
            made = ""
            try:
                m = json.loads(self.manifest_path.read_text())
                made = f" (defense {m['defense']}, preset {m['preset']})"
            except Exception:  # the manifest may be damaged too; the hint is then generic
                pass
            return (f"re-run the `harness evaluate DEFENSE ...` command that made this run{made} with "
                    f"`--run-dir {self.path}`: it rewrites the file and keeps every finished model")
        return (f"`harness evaluate --run-dir {self.path}` (or the command that made this run, with that --run-dir) "
                "rebuilds it and keeps every finished model")

    def _read_json(self, path: Path) -> dict[str, Any]:
        hint = self.repair_hint(config_damaged=path == self.config_path)
        try:
            obj = jsonio.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DamagedFileError(path, _reason(e), hint) from None
        if not isinstance(obj, dict):
            raise DamagedFileError(path, f"holds a JSON {type(obj).__name__}, not an object", hint)
        return obj

    def _heal(self, path: Path, reason: str) -> None:
        moved = move_aside(path)
        self.healed.append(f"{path.relative_to(self.path)} was damaged ({reason}): moved aside to {moved.name} "
                           "and rebuilt")

    def recover(self) -> str | None:
        """Finish an interrupted commit of the attack phase's outputs (:func:`commit_files`); call
        with the run's lock held. A note for the user when one was finished, else None."""
        if self.path.is_dir() and recover_commit(self.path):
            return "finished writing the results of an interrupted attack phase"
        return None

    def commit(self, files: dict[str, bytes]) -> None:
        """Replace ``files`` (paths relative to the run directory) as one change (:func:`commit_files`)."""
        commit_files(self.path, files)

    # --- top level -------------------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def require(self) -> None:
        if not self.path.is_dir():
            raise RunDirError(f"run directory {str(self.path)!r} does not exist")
        if not self.exists() or not self.config_path.is_file():
            raise RunDirError(f"{str(self.path)!r} is not a run directory (no manifest.json/config.json)")

    def load_config(self) -> ExperimentConfig:
        """config.json, checked against the manifest: its training settings (everything in the run
        fingerprint) must be those the models were trained with (:meth:`check_config`)."""
        self.require()
        raw = self._read_json(self.config_path)
        try:
            cfg = validate_config(raw)
        except ConfigError as e:
            raise DamagedFileError(self.config_path, f"not a valid config: {e}",
                                   self.repair_hint(config_damaged=True)) from None
        self.check_config(cfg)
        return cfg

    def _readable_manifest(self) -> dict[str, Any] | None:
        """manifest.json, or None where it is missing or damaged (its own readers report that)."""
        if not self.manifest_path.is_file():
            return None
        try:
            return self._read_json(self.manifest_path)
        except DamagedFileError:
            return None

    def check_config(self, cfg: ExperimentConfig) -> None:
        """Refuse (RunDirError, one line) a config.json edited after training: its fingerprinted part
        (harness.run.runner.trained_config) must equal the manifest's ``trained_config``, naming each
        changed setting; a manifest from before that record is checked by re-computing the run
        fingerprint where it can be (same models version, a built-in defense). Attack and run
        settings are not fingerprinted: they may change (``harness attack RUN --set attack...``)."""
        manifest = self._readable_manifest()
        if manifest is None:
            return
        fix = ("only settings outside the run fingerprint (attack.*, run.*, data.path) may change after training; "
               "restore the trained value"
               f"{{s}} in {self.config_path}, or train the new settings in another run directory")
        trained = manifest.get("trained_config")
        if isinstance(trained, dict):
            now = cfg.model_determining()
            for name in manifest.get("plumbing_params") or []:
                now["defense_params"].pop(name, None)
            changed = changed_keys(trained, jsonio.loads(jsonio.dumps(now)))
            if changed:
                listed = "; ".join(f"{k} is {jsonio.dumps(new)} there but the models were trained with "
                                   f"{jsonio.dumps(old)}" for k, old, new in changed[:3])
                more = f" (and {len(changed) - 3} more)" if len(changed) > 3 else ""
                raise RunDirError(f"{self.config_path} was edited after training: {listed}{more} (manifest.json); "
                                  + fix.format(s="s" if len(changed) > 1 else ""))
            return
        from harness.core.registry import is_file_reference
        from harness.core.version import MODELS_VERSION, models_version_of

        if models_version_of(manifest) != MODELS_VERSION or not manifest.get("data_fingerprint") or \
                is_file_reference(cfg.defense):  # another version's hash, or a plugin file that may have moved
            return
        from harness.run.fingerprint import fingerprint_of

        if fingerprint_of(cfg, str(manifest["data_fingerprint"])) != manifest.get("fingerprint"):
            raise RunDirError(f"{self.config_path} does not describe the run's models: the run fingerprint "
                              "re-computed from it differs from manifest.json's (it was edited after training); "
                              + fix.format(s="s"))

    def check_results(self, results: dict[str, Any], path: Path | None = None) -> None:
        """Refuse (RunDirError, one line) a results.json that is not the one the attack phase wrote
        into this run directory: another run's (fingerprint), or edited since (its
        :func:`results_digest` differs from the manifest's ``results_digest``). Nothing to check
        without a readable manifest, or for results written before the digest was recorded."""
        manifest = self._readable_manifest()
        if manifest is None:
            return
        path = path or self.path / "results.json"
        fix = f"`harness attack {self.path}` rewrites it from the saved signals"
        theirs, ours = str(results.get("fingerprint")), str(manifest.get("fingerprint"))
        if theirs != ours:
            raise RunDirError(f"{path} belongs to another run than {self.manifest_path} (run fingerprint "
                              f"{theirs[:12]}, the models' {ours[:12]}); {fix}")
        digest = manifest.get("results_digest")
        if digest is not None and digest != results_digest(results):
            raise RunDirError(f"{path} was edited after the attack phase wrote it (its content no longer matches the "
                              f"digest {self.manifest_path.name} records); {fix}")

    def load_manifest(self) -> dict[str, Any]:
        self.require()
        return self._read_json(self.manifest_path)

    def save_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.manifest_path, manifest)

    def init(self, cfg: ExperimentConfig, run_fingerprint: str, manifest: dict[str, Any], data: ImageDataset) -> None:
        """Create the directory, or check that an existing one belongs to the same run. A damaged
        ``manifest.json``, ``config.json`` or ``data.npz`` is moved aside and rebuilt (noted in
        :attr:`healed`), unless a readable ``config.json`` shows the folder holds another run."""
        if self.manifest_path.is_file():
            try:
                self.load_manifest()
            except DamagedFileError as e:
                self._check_same_run(cfg)
                self._heal(self.manifest_path, e.reason)
        if self.exists():
            old = self.load_manifest()
            if old.get("fingerprint") != run_fingerprint:
                raise RunDirError(
                    f"{self.path} holds a different run (fingerprint {str(old.get('fingerprint'))[:12]}, this run "
                    f"{run_fingerprint[:12]}): its models were trained with another config, data or harness "
                    "version. Use another --out/--run-dir or delete the folder; runs are never mixed."
                )
            # keep the per-level fingerprints recorded so far, the run's creation time (results.json
            # records it; a resume must not change it under the results) and the folder it was created in
            # (its relative canary paths resolve from there: harness.run.runner.creation_folder)
            kept = ("levels", "created", "cwd") if "cwd" in old else ("levels", "created")
            manifest = {**old, **{k: v for k, v in manifest.items() if k not in kept}}
        self.path.mkdir(parents=True, exist_ok=True)
        saved = cfg.model_dump(mode="json")
        if self.config_path.is_file():
            try:
                before = validate_config(self._read_json(self.config_path))
                if (self.path / "results.json").is_file():
                    # the attack settings change with the results, in the attack phase's commit
                    # (harness.audit.report.write_outputs): until then config.json keeps the ones the
                    # saved results were computed with, so an interrupted run leaves the two agreeing
                    saved["attack"] = before.model_dump(mode="json")["attack"]
            except DamagedFileError as e:
                self._heal(self.config_path, e.reason)
            except ConfigError as e:
                self._heal(self.config_path, f"not a valid config: {e}")
        atomic_write_json(self.config_path, saved)
        data_path = self.path / "data.npz"
        if data_path.is_file():
            try:
                ok = ImageDataset.load(data_path).fingerprint() == data.fingerprint()
                problem = "its images or labels differ from the dataset's"
            except Exception as e:  # any failure to read it back means the file is damaged
                ok, problem = False, _reason(e)
            if not ok:
                self._heal(data_path, problem)
        if not data_path.is_file():
            import io

            buf = io.BytesIO()
            data.save(buf)  # type: ignore[arg-type]
            atomic_write_bytes(data_path, buf.getvalue())
        self.save_manifest(manifest)

    def _check_same_run(self, cfg: ExperimentConfig) -> None:
        """Before rebuilding a damaged manifest: refuse if a readable config.json is another run's."""
        try:
            theirs = self.load_config()
        except RunDirError:
            return  # nothing readable to compare with: every finished model is still checked by fingerprint
        if theirs.model_determining() != cfg.model_determining():
            raise RunDirError(f"{self.manifest_path} is damaged and {self.config_path} describes another run; "
                              "refusing to rebuild it. Use another --out/--run-dir.")

    def load_data(self) -> ImageDataset:
        path = self.path / "data.npz"
        if not path.is_file():
            raise RunDirError(f"{path} is missing; {self.repair_hint()}")
        try:
            return ImageDataset.load(path)
        except Exception as e:  # any failure to read it back means the file is damaged
            raise DamagedFileError(path, _reason(e), self.repair_hint()) from e

    def load_eval_labels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(test labels, validation labels, training-pool labels) of the run's dataset, read without
        its images (the attack phase needs no image); the validation labels are empty where none are
        held out."""
        path = self.path / "data.npz"
        if not path.is_file():
            raise RunDirError(f"{path} is missing; {self.repair_hint()}")
        try:
            with np.load(path) as z:
                return (z["y_test"], z["y_val"] if "y_val" in z.files else np.zeros(0, np.int64), z["y_train"])
        except Exception as e:  # any failure to read it back means the file is damaged
            raise DamagedFileError(path, _reason(e), self.repair_hint()) from e

    # --- levels ----------------------------------------------------------------------------
    def level_dir(self, level: str) -> Path:
        return self.path / level

    def save_level(self, ld: LevelDesign, fingerprint: str) -> None:
        """Write a level's design, or check an existing one has the same fingerprint."""
        manifest = self.load_manifest()
        old = manifest.get("levels", {}).get(ld.level)
        if old is not None and old["fingerprint"] != fingerprint:
            raise RunDirError(
                f"{self.path}/{ld.level} was built from another audit design or canaries "
                f"(fingerprint {old['fingerprint'][:12]} vs {fingerprint[:12]}); refusing to mix models"
            )
        c = ld.canaries
        design_path = self.level_dir(ld.level) / "design.npz"
        if design_path.is_file():
            try:
                self.load_level(ld.level)
            except DamagedFileError as e:
                self._heal(design_path, e.reason)
        atomic_write_npz(
            design_path,
            audit_indices=ld.design.audit_indices,
            membership=ld.design.membership,
            canary_x=c.x,
            canary_y=c.y,
            evaluated=c.evaluated,
            extra_x=c.extra_x,
            extra_y=c.extra_y,
            canary=np.array(ld.canary),
            population_indices=ld.population_indices,
            **({"neighbour_x": c.neighbour_x} if c.has_neighbours else {}),
        )
        manifest.setdefault("levels", {})[ld.level] = {"canary": ld.canary, "fingerprint": fingerprint,
                                                        "canary_info": ld.canary_info}
        self.save_manifest(manifest)

    def level_fingerprint(self, level: str) -> str:
        try:
            return self.load_manifest()["levels"][level]["fingerprint"]
        except KeyError:
            raise RunDirError(f"{self.path} has no {level}-level experiment") from None

    def levels(self) -> list[str]:
        """Experiment names in the order they were created (``population``, ``sample-<canary>``...)."""
        return list(self.load_manifest().get("levels", {}))

    def load_level(self, level: str) -> LevelDesign:
        path = self.level_dir(level) / "design.npz"
        if not path.is_file():
            raise RunDirError(f"{path} is missing")
        info = (self.load_manifest().get("levels", {}).get(level) or {}).get("canary_info", {})
        try:
            return self._read_level(path, level, info)
        except Exception as e:  # any failure to read it back means the file is damaged
            raise DamagedFileError(path, _reason(e), self.repair_hint()) from e

    @staticmethod
    def _read_level(path: Path, level: str, info: dict[str, Any]) -> LevelDesign:
        with np.load(path) as z:
            return LevelDesign(
                level=level,
                canary=str(z["canary"]),
                design=AuditDesign(audit_indices=z["audit_indices"], membership=z["membership"]),
                canaries=Canaries(
                    x=z["canary_x"], y=z["canary_y"], evaluated=z["evaluated"], extra_x=z["extra_x"], extra_y=z["extra_y"],
                    **({"neighbour_x": z["neighbour_x"]} if "neighbour_x" in z.files else {}),
                ),
                population_indices=z["population_indices"] if "population_indices" in z.files
                else np.zeros(0, np.int64),
                canary_info=info,
            )

    # --- signals ---------------------------------------------------------------------------
    def signals_path(self, level: str, index: int) -> Path:
        return self.level_dir(level) / "signals" / f"model_{index:04d}.npz"

    def write_signals(self, level: str, index: int, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        atomic_write_npz(self.signals_path(level, index), meta=np.array(json.dumps(meta)), **arrays)

    def read_signals(self, level: str, index: int) -> ModelSignals | None:
        """The model's signals if its file is finished and belongs to this level's design; None if
        there is no file or it belongs to another design (never read as finished). A file that
        cannot be read, or whose signals hold a NaN (never written: a signal that computes one is
        refused, harness.run.signals.compute_signals), raises :class:`DamagedFileError`."""
        path = self.signals_path(level, index)
        if not path.is_file():
            return None
        try:
            with np.load(path) as z:
                meta = _signals_meta(z)
                arrays = {k: z[k] for k in z.files if k != "meta"}
            for name, a in arrays.items():
                if np.issubdtype(a.dtype, np.floating) and (nan := _nan_count(a)):
                    raise ValueError(f"signal {name!r} holds {nan} NaN value{'s' if nan > 1 else ''}")
        except Exception as e:  # any failure to read it back means the file is damaged
            raise DamagedFileError(path, _reason(e), f"`harness evaluate --run-dir {self.path}` moves it aside and "
                                   "retrains that model") from e
        if not self._of_this_design(meta, level, index):
            return None
        return ModelSignals(index=index, arrays=arrays, meta=meta)

    def _of_this_design(self, meta: dict[str, Any], level: str, index: int) -> bool:
        """Whether a signals file's metadata is model ``index``'s of this level's current design."""
        return meta.get("level_fingerprint") == self.level_fingerprint(level) and meta.get("model_index") == index

    def read_signals_meta(self, level: str, index: int) -> dict[str, Any] | None:
        """The metadata of the model's finished signals file, without reading its arrays; None where
        :meth:`read_signals` would find no finished file of this design, or cannot read it (that
        method reports the damage)."""
        path = self.signals_path(level, index)
        if not path.is_file():
            return None
        try:
            with np.load(path) as z:
                meta = _signals_meta(z)
        except Exception:
            return None
        return meta if self._of_this_design(meta, level, index) else None

    def quarantine_damaged(self, level: str, num_models: int) -> list[tuple[DamagedFileError, Path]]:
        """Move every unreadable signals file of ``level`` aside (``.damaged``), so that its model
        counts as unfinished and is retrained; return (what was wrong, new path) per file."""
        moved = []
        for s in range(num_models):
            try:
                self.read_signals(level, s)
            except DamagedFileError as e:
                moved.append((e, move_aside(e.path)))
        return moved

    # --- saved models (run.save_models) -------------------------------------------------------
    def model_path(self, level: str, index: int) -> Path:
        return self.level_dir(level) / "models" / f"model_{index:04d}.pt"

    def write_model(self, level: str, index: int, state: dict[str, Any], meta: dict[str, Any]) -> None:
        """Save a served model's state (:meth:`defenses.base.ServedModel.model_state`) with ``meta``
        (level fingerprint, model index, seed), atomically."""
        import io

        import torch

        buf = io.BytesIO()
        torch.save({"meta": dict(meta), **state}, buf)
        atomic_write_bytes(self.model_path(level, index), buf.getvalue())

    def read_model(self, level: str, index: int, level_fingerprint: str | None = None) -> dict[str, Any] | None:
        """A saved model's state and ``meta``, if its file exists, loads, and belongs to this level's
        design (or to ``level_fingerprint`` when given) and index; else None."""
        import torch

        path = self.model_path(level, index)
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a truncated or foreign file is not a saved model
            return None
        meta = state.get("meta", {}) if isinstance(state, dict) else {}
        expected = level_fingerprint if level_fingerprint is not None else self.level_fingerprint(level)
        if meta.get("level_fingerprint") != expected or meta.get("model_index") != index:
            return None
        return state

    def saved_models(self, level: str, num_models: int) -> list[int]:
        """Indices whose saved-model file exists (not loaded: :meth:`read_model` checks it)."""
        return [s for s in range(num_models) if self.model_path(level, s).is_file()]

    def finished_models(self, level: str, num_models: int) -> list[int]:
        """Indices with a finished signals file of this level's design; a damaged file is not one
        (its model is retrained; ``harness evaluate`` first moves it aside and says so)."""
        out = []
        for s in range(num_models):
            try:
                if self.read_signals(level, s) is not None:
                    out.append(s)
            except DamagedFileError:
                continue
        return out

    # --- progress of running jobs (engine-agnostic: plain files in the run directory) ----------
    def progress_path(self, level: str, index: int) -> Path:
        return self.level_dir(level) / "progress" / f"model_{index:04d}.txt"

    def write_progress(self, level: str, index: int, fraction: float) -> None:
        """Best effort: a progress file that cannot be written (a full disk) only stalls the bar; the
        job's real writes (its signals) report the problem."""
        try:
            atomic_write_bytes(self.progress_path(level, index), f"{fraction:.4f}".encode())
        except OSError:
            pass

    def read_progress(self, level: str) -> dict[int, float]:
        """Fraction done of each model whose job is running (as last reported by the job)."""
        out = {}
        for p in (self.level_dir(level) / "progress").glob("model_*.txt"):
            try:
                out[int(p.stem.split("_")[1])] = float(p.read_text())
            except (OSError, ValueError):
                continue
        return out

    def clear_progress(self, level: str, index: int) -> None:
        self.progress_path(level, index).unlink(missing_ok=True)

    def clean_temp_files(self, level: str) -> int:
        folder = self.level_dir(level) / "signals"
        n = 0
        if folder.is_dir():
            for p in folder.glob(".*.tmp"):
                p.unlink(missing_ok=True)
                n += 1
        for p in (self.level_dir(level) / "progress").glob("*"):
            p.unlink(missing_ok=True)
        return n
