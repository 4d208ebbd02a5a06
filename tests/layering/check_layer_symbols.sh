#!/usr/bin/env bash
# Fails when a layer's object files use a symbol that only a higher layer
# defines: the link-time half of the layering rule (docs/architecture.md#layers),
# which OBJECT libraries do not check by themselves (their undefined symbols
# are only resolved when the shared library is linked, whatever layer they
# come from). Symbols that no layer defines (libc, UCX, CUDA, ...) are not
# the layers' business.
#
# usage: check_layer_symbols.sh <layer>=<object>[|<object>...] ...   (bottom layer first)
set -euo pipefail

(($# > 0)) || { echo "usage: $0 <layer>=<objects separated by |> ... (bottom first)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

names=()
for arg in "$@"; do
  name=${arg%%=*}
  objects=${arg#*=}
  [[ -n "$name" && "$objects" != "$arg" ]] || { echo "check_layer_symbols: bad argument '$arg'" >&2; exit 2; }
  IFS='|' read -r -a files <<<"$objects"
  ((${#files[@]} > 0)) || { echo "check_layer_symbols: layer $name has no object files" >&2; exit 2; }
  nm -P --defined-only "${files[@]}" 2>/dev/null | awk 'NF >= 2 && $1 !~ /:$/ { print $1 }' | sort -u >"$work/$name.defined"
  nm -P --undefined-only "${files[@]}" 2>/dev/null | awk 'NF >= 2 && $1 !~ /:$/ { print $1 }' | sort -u >"$work/$name.undefined"
  names+=("$name")
done

violations=0
for ((i = 0; i < ${#names[@]}; i++)); do
  layer=${names[i]}
  : >"$work/own"
  for ((j = 0; j <= i; j++)); do cat "$work/${names[j]}.defined" >>"$work/own"; done
  sort -u -o "$work/own" "$work/own"
  for ((j = i + 1; j < ${#names[@]}; j++)); do
    upper=${names[j]}
    # Used by this layer, defined by none at or below it, defined by `upper`.
    comm -23 "$work/$layer.undefined" "$work/own" | comm -12 - "$work/$upper.defined" >"$work/up"
    while read -r symbol; do
      echo "upward symbol: layer $layer uses $(c++filt <<<"$symbol"), defined in layer $upper"
      violations=$((violations + 1))
    done <"$work/up"
  done
done

if ((violations > 0)); then
  echo "check_layer_symbols: $violations symbol(s) of a higher layer used below it" >&2
  exit 1
fi
echo "check_layer_symbols: ${#names[@]} layers, no layer uses a symbol defined only above it"
