# Sourced by the peer scripts (bench/*.sh): PyTorch's BLAS (Debian's OpenBLAS) in its best configuration for
# this CPU. Some machines preset OPENBLAS_CORETYPE to an older core than they are (older OpenBLAS builds
# misdetect them), and a fixed newer one (SKYLAKEX) dies with "Illegal instruction" on a CPU without
# AVX-512, so the core type follows the CPU's own flags.
if grep -qw avx512f /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SKYLAKEX
elif grep -qw avx2 /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=HASWELL
else
  unset OPENBLAS_CORETYPE
fi
echo "peers: OpenBLAS core type ${OPENBLAS_CORETYPE:-detected by OpenBLAS} ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))" >&2
