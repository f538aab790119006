"""benchmarks/bench_gpu.py, the script a session with a lent GPU runs (issue 13), on the CPU at toy
scale: every figure runs end to end and writes the JSON that docs/gpu.md's figures are read from.

The data are real CIFAR-10 images (the first 24 of each training batch of the shared subset, 60 test
images). ``epoch`` times the real WRN16-4; ``hamp`` and ``ssl`` swap in small networks through the
script's ``--set`` (the GPU runs WRN16-4 and ResNet-18) so that the test stays under a minute.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHARED

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_gpu import TOY as TOY_SETTINGS  # noqa: E402
from bench_gpu import toy_cifar as make_toy_cifar  # noqa: E402

TOY = ["--device", "cpu", "--models", "6", "--epochs", "1", *TOY_SETTINGS]


@pytest.fixture
def toy_cifar(tmp_path, cifar_subset) -> Path:
    out = make_toy_cifar(cifar_subset, tmp_path / "toy-cifar")
    (out / "ood_imagenet_samples.pt").unlink(missing_ok=True)  # the ssl test adds it itself
    return out


def test_toy_cifar_is_a_small_cifar_folder(toy_cifar):
    from harness.core.data import load_cifar10

    d = load_cifar10(toy_cifar, download=False)
    assert d.x_train.shape == (120, 3, 32, 32) and d.x_test.shape == (60, 3, 32, 32)
    assert len(set(d.y_train.tolist())) > 5  # real, varied labels


def bench(what: str, data: Path, out: Path, *extra: str) -> dict:
    tag = extra[extra.index("--tag") + 1] if "--tag" in extra else None
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), what, "--data-dir", str(data), "--out", str(out),
           *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    written = out / (f"{what}-{tag}.json" if tag else f"{what}.json")
    assert json.loads(written.read_text()) == printed  # what comes back from a device is the file
    assert printed["device"] == "cpu"
    return printed


@pytest.mark.slow
def test_epoch_times_the_wrn_and_projects_the_paper_setting(toy_cifar, tmp_path):
    fig = bench("epoch", toy_cifar, tmp_path, "--device", "cpu", "--epochs", "1")
    assert fig["train_images"] == 120 and fig["epochs_timed"] == 1 and fig["batch_size"] == 256
    assert fig["seconds_per_epoch"] > 0
    assert fig["seconds_per_image"] == pytest.approx(fig["seconds_per_epoch"] / 120)
    # 2 x 64 models x 200 epochs x 25 000 images at the measured rate
    assert fig["projected_hours_2x64_models_200_epochs_25k_images"] == pytest.approx(
        fig["seconds_per_image"] * 25_000 * 200 * 128 / 3600)


@pytest.mark.parametrize("args, message", [
    (["epoch", "--workers", "4"], "--workers would not apply to epoch (epoch reads --epochs, --set)"),
    (["smoke", "--models", "8", "--set", "train.epochs=3"], "--models, --set would not apply to smoke (smoke reads none"),
    (["attack", "--epochs", "3"], "--epochs would not apply to attack (attack reads --samples)"),
    (["fast", "--samples", "10"], "--samples would not apply to fast"),
    (["hamp", "--ood", "photos"], "--ood would not apply to hamp"),
])
def test_flags_that_would_not_apply_are_refused(tmp_path, args, message):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_gpu.py"), *args, "--data-dir",
                           str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and message in " ".join(proc.stderr.split())


def test_attack_reports_the_attack_phase_and_its_share_of_the_projected_training(tmp_path):
    """A small synthetic run (--samples 200); the share uses the epoch figure found in --out.
    With --tag the figure's file is attack-TAG.json."""
    (tmp_path / "epoch.json").write_text(json.dumps({"projected_hours_2x64_models_200_epochs_25k_images": 2.0}))
    fig = bench("attack", tmp_path, tmp_path, "--samples", "200", "--device", "cpu", "--tag", "small")
    assert fig["tag"] == "small" and not (tmp_path / "attack.json").exists()
    assert fig["models"] == 64 and fig["samples"] == 200 and fig["views"] == 18 and fig["dtype"] == "float16"
    assert fig["variants"] == 22 and fig["attack_cpu_seconds"] > 0 and fig["peak_rss_mib"] > 0
    assert fig["bytes_written"] > fig["roc_bytes"] > 0
    assert fig["share_of_projected_training_per_level"] == pytest.approx(
        fig["attack_wall_seconds"] / 3600)  # 2 h for two levels: 1 h per level


@pytest.mark.slow
def test_fast_hamp_and_ssl_figures_run_end_to_end(toy_cifar, tmp_path):
    runs = tmp_path / "runs"
    fast = bench("fast", toy_cifar, tmp_path, *TOY, "--runs", str(runs))
    assert fast["models_per_level"] == 6 and set(fast["levels"]) == {"sample-mislabeled"}
    assert fast["extra_args"][-2:] == ["--set", "run.level=sample"]
    (kept,) = runs.iterdir()  # --runs keeps the run; the same command again resumes it: same numbers
    again = bench("fast", toy_cifar, tmp_path, *TOY, "--runs", str(runs))
    assert [p.name for p in runs.iterdir()] == [kept.name] and again["levels"] == fast["levels"]
    assert again["wall_seconds"] < fast["wall_seconds"]

    hamp = bench("hamp", toy_cifar, tmp_path, *TOY, "--set", "train.model=cnn", "--set", "train.width=8")
    variants = hamp["levels"]["sample-mislabeled"]["primary_variants"]
    assert hamp["sample_lira"] == max(v for k, v in variants.items() if k.startswith("lira:"))
    assert hamp["sample_label_only"] == max(v for k, v in variants.items() if k.startswith("label-only:"))
    assert hamp["label_only_beats_lira"] == (hamp["sample_label_only"] > hamp["sample_lira"])

    # auto OOD source: the paper's ImageNet canaries when the data folder holds them
    paper_ood = SHARED / "data" / "ood_imagenet_samples.pt"
    if not paper_ood.is_file():
        pytest.skip(f"{paper_ood} not found (only CI and developers have ../shared)")
    shutil.copy(paper_ood, toy_cifar)
    ssl = bench("ssl", toy_cifar, tmp_path, *TOY, "--set", "audit.canary=ood", "--set", "defense_params.encoder=cnn",
                "--set", "defense_params.width=8", "--set", "defense_params.batch_size=32",
                "--set", "defense_params.probe_epochs=1")
    assert ssl["ood_source"] == str(toy_cifar / "ood_imagenet_samples.pt")
    variants = ssl["levels"]["sample-ood"]["primary_variants"]
    best = ssl["ood_best_by_attack"]
    assert best["contrastive"] == max(v for k, v in variants.items() if k.startswith("contrastive:"))
    assert best["lira"] == max(v for k, v in variants.items() if k.startswith("lira:"))
    assert ssl["contrastive_beats_lira_on_ood"] == (best["contrastive"] > best["lira"])
    assert best["lira-sslview"] == max(v for k, v in variants.items() if k.startswith("lira-sslview:"))
    assert ssl["contrastive_beats_lira_sslview_on_ood"] == (best["contrastive"] > best["lira-sslview"])
