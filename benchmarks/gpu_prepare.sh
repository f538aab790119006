#!/usr/bin/env bash
# Ready this checkout for a lent GPU session (issue 13; docs/gpu.md). Run here, on the
# CPU machine, from the repository root. It fills .gpu/ (ignored by git), which each device call
# carries:
#   .gpu/whl/   the Python 3.12 x86-64 wheels the harness needs that the GPU image lacks (the image has
#               torch, numpy, scipy, scikit-learn, pandas, pyyaml, rich, typer; not pydantic, opacus
#               or dp-accounting), pinned to the versions the tests pass with here
#   .gpu/data/cifar10-subset/   the shared CIFAR-10 subset and the paper's OOD ImageNet canaries
#               (../shared does not travel to the device)
# Then, on the device: bash benchmarks/gpu_run.sh FIGURE... (run(command=..., carry=[".gpu"])).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared}
WHEELS=(pydantic==2.13.4 pydantic_core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
        typing_extensions==4.15.0 opacus==1.6.0 dp-accounting==0.6.0 dm-tree==0.1.10 attrs==23.2.0)
rm -rf .gpu/whl && mkdir -p .gpu/whl .gpu/data
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .gpu/whl "${WHEELS[@]}"
test -f "$SHARED/data/cifar10-subset/cifar-10-batches-py/data_batch_1" || {
    echo "no CIFAR-10 subset under $SHARED/data (set SHARED=...)" >&2; exit 1; }
rm -rf .gpu/data/cifar10-subset
cp -r "$SHARED/data/cifar10-subset" .gpu/data/cifar10-subset
chmod -R u+w .gpu/data/cifar10-subset
cp "$SHARED/data/ood_imagenet_samples.pt" .gpu/data/cifar10-subset/
ls .gpu/whl
du -sh .gpu
