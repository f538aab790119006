#!/usr/bin/env bash
# On a lent GPU machine (docs/gpu.md): install the wheels that
# benchmarks/gpu_prepare.sh put in .gpu/, then run benchmarks/bench_gpu.py figures on the CIFAR-10
# subset in .gpu/data, each result under $OUT. From the device tool:
#   run(command="bash benchmarks/gpu_run.sh smoke epoch attack fast", carry=[".gpu"], timeout_s=600)
# FIGURE is smoke (every figure at toy scale: do the code paths run on this device? about a minute),
# epoch, attack (after epoch in the same call: it reads $OUT/epoch.json), fast, hamp or ssl; or campaign:
# benchmarks/gpu_campaign.py, the paper's questions item by item within the figure's limit (its state and
# results come back in $OUT/campaign-update.tar.gz; `python benchmarks/gpu_campaign.py --apply` here).
# ARGS_<figure> adds arguments to one figure (ARGS_hamp="--models 8 --epochs 30 --workers 4").
# BUDGET (default 560 s, inside the device call's 600 s) bounds the whole call: each figure stops
# after LIMIT_<figure> seconds or what is left of the budget, whichever is less, and a figure with
# under 30 s left is skipped, so that what finished always comes back. Runs are kept under
# /tmp/gpu-runs: the same figure again on the same machine (a call within its warm period) resumes.
# What comes back: $OUT/<figure>.json, the whole log in $OUT/log.txt, the device in $OUT/device.txt.
set -uo pipefail
budget_end=$((SECONDS + ${BUDGET:-560}))  # from the start: the install counts too
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder whose files come back (the device tool sets it)}"
[ $# -gt 0 ] || { echo "usage: bash benchmarks/gpu_run.sh FIGURE..." >&2; exit 2; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
    || { echo "wheel install failed: did benchmarks/gpu_prepare.sh run, and is .gpu carried?" >&2; exit 1; }
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  nproc
  python3 -c "import torch, pydantic, harness; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'device', torch.cuda.get_device_name(), 'pydantic', pydantic.VERSION, 'harness', harness.__version__)"
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
status=0
for fig in "$@"; do
    extra="ARGS_$fig"; limit_var="LIMIT_$fig"
    left=$((budget_end - SECONDS - 25))  # 25 s for an interrupted figure to stop (--kill-after 20)
    limit=${!limit_var:-$left}; [ "$limit" -le "$left" ] || limit=$left
    if [ "$limit" -lt 30 ]; then
        echo "=== $fig skipped: $((budget_end - SECONDS)) s of BUDGET left" | tee -a "$OUT/log.txt"; status=1; continue
    fi
    runs=(--runs /tmp/gpu-runs)
    case "$fig" in smoke|epoch|attack) runs=() ;; esac
    echo "=== $fig ${!extra:-} (limit $limit s) $(date +%T)" | tee -a "$OUT/log.txt"
    cmd=(benchmarks/bench_gpu.py "$fig"); [ "$fig" = campaign ] && cmd=(benchmarks/gpu_campaign.py --budget-s $((limit - 10)))
    # shellcheck disable=SC2086
    timeout --signal=INT --kill-after=20 "$limit" python3 "${cmd[@]}" \
        --data-dir .gpu/data/cifar10-subset --device cuda --out "$OUT" "${runs[@]}" ${!extra:-} 2>&1 | tee -a "$OUT/log.txt"
    rc=${PIPESTATUS[0]}
    echo "=== $fig exit $rc $(date +%T)" | tee -a "$OUT/log.txt"
    [ "$rc" -eq 0 ] || status=$rc
done
exit $status
