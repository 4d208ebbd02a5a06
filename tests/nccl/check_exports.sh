#!/bin/sh
# Nccl.Exports: the dynamic symbols libantdt_nccl.so defines must be exactly the
# functions nccl.h declares (ncclX and pncclX): none missing, none extra.
#   check_exports.sh <nccl.h> <libantdt_nccl.so>
set -eu
header=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Declarations: a return type at the line start, then the name and '('.
sed -nE 's/^(ncclResult_t|const char ?\*|void)[[:space:]]+\*?[[:space:]]*(p?nccl[A-Za-z0-9_]+)[[:space:]]*\(.*/\2/p' "$header" |
  sort -u >"$tmp/declared"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$tmp/exported"
declared=$(wc -l <"$tmp/declared")
[ "$declared" -ge 40 ] || { echo "only $declared functions found in $header: the extraction is broken"; exit 1; }
status=0
comm -23 "$tmp/declared" "$tmp/exported" | sed 's/^/missing: /' >"$tmp/missing"
comm -13 "$tmp/declared" "$tmp/exported" | sed 's/^/extra: /' >"$tmp/extra"
if [ -s "$tmp/missing" ] || [ -s "$tmp/extra" ]; then
  cat "$tmp/missing" "$tmp/extra"
  status=1
fi
echo "nccl.h declares $declared functions; $lib exports $(wc -l <"$tmp/exported") symbols"
exit $status
