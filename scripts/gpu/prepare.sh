#!/usr/bin/env bash
# Run here, before a lease: fill .gpu/ (git-ignored, carried to the GPU machine) with what its
# image lacks (/work/.library/device/KINDS.md lists its packages): wheels of the project's
# dependencies that are not there, for its Python 3.12, at the versions this checkout's .venv
# tests with, and the Multi30k raw files (the machine has no internet).
#   scripts/gpu/prepare.sh            # then: run(..., carry=[".gpu"])
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
DATA=${MINIMT_DATA_URL:-/work/shared/data/multi30k}
# Not in the image: Hydra and its parser, datasets and its two pickling packages, the allocator.
PACKAGES=${PACKAGES:-hydra-core omegaconf datasets dill multiprocess cmeel-mimalloc}
rm -rf .gpu/wheels .gpu/multi30k
mkdir -p .gpu/wheels .gpu/multi30k
pins=()
for name in $PACKAGES; do
    pins+=("$name==$("$PY" -c "import importlib.metadata as m; print(m.version('$name'))")")
done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/wheels "${pins[@]}"
# omegaconf's parser runtime is published as a source archive only: build its (pure) wheel here.
antlr=$("$PY" -c "import importlib.metadata as m; print(m.version('antlr4-python3-runtime'))")
"$PY" -m pip wheel -q --no-deps -w .gpu/wheels "antlr4-python3-runtime==$antlr"
cp "$DATA"/* .gpu/multi30k/
ls .gpu/wheels
du -sh .gpu
