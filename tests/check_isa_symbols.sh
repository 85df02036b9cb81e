#!/usr/bin/env bash
# Checks that the objects compiled for one instruction set (src/kernels/isa/) define no symbol that
# another translation unit could share: every weak (COMDAT) symbol they define must carry the set's
# name. A weak copy of a shared inline function compiled for AVX-512 could otherwise be the one the
# linker keeps for every caller, and a CPU without AVX-512 would fault.
#
#   tests/check_isa_symbols.sh ISA OBJECT...
set -euo pipefail
isa=$1
shift
# Itanium mangling writes a namespace as its length and name: "6avx512".
tag="${#isa}${isa}"
status=0
for object in "$@"; do
  while read -r _ type name; do
    [[ "$name" == *"$tag"* ]] && continue
    [[ "$name" == DW.ref.* ]] && continue  # the exception personality routine's address: data, not code
    echo "$object: weak symbol without '$isa' in its name: $(c++filt "$name") ($name)"
    status=1
  done < <(nm --defined-only "$object" | awk '$2 ~ /^[WVu]$/')
done
((status == 0)) && echo "$# objects for $isa: every weak symbol is the set's own"
exit $status
