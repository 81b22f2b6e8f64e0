#!/usr/bin/env bash
# Prints, for each sample, where its toplevel bindings live in the native module
# block: "SYMBOL FIELD IDENT" (e.g. "camlCache_leak 1 cache"), then the block's
# size in fields: "SYMBOL size N" (e.g. "camlCache_leak size 4").
#
#   samples/module-fields.sh [TOOLCHAIN] [NAME...]   (see samples/build.sh)
#
# Method: ocamlopt -dlambda (closure, non-flambda mode) compiles a toplevel
# structure into stores "(setfield_ptr(root-init) FIELD (global Module!) ident/N)"
# into the static module block, whose symbol is caml<Module> (header wosize =
# number of fields). -dcmm shows the same block as (data int HEADER [global
# "camlModule"] "camlModule": int 1 ...), whose header gives the size. Fields that
# the code fills with something other than an identifier (a primitive, a copy of
# an `include`d field) have no line, but count in the size.
# Bindings of submodules (e.g. Key.equal in weak_ephemeron) also get fields of
# the outer block. Uses build.sh's build directory for Heapsnap_sample's .cmi.
set -euo pipefail
variant="${1:-std}"; shift || true
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_dir="$("$here/build.sh" "$variant" 2>/dev/null)"
build="$(dirname "$build_dir")/.build/$(basename "$build_dir")"
prefix="$("$here/../scripts/ocaml-toolchain.sh" "$variant")"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$here"/*.ml; do
    n="$(basename "$f" .ml)"; [ "$n" = heapsnap_sample ] || names+=("$n")
  done
fi
for n in "${names[@]}"; do
  "$prefix/bin/ocamlopt" -I "$build" -I +threads -I +unix -I +dynlink -dlambda -dcmm -c \
      -o "$tmp/$n.cmx" "$here/$n.ml" 2>&1 >/dev/null | tr '\n' ' ' >"$tmp/$n.dump"
  grep -oE "setfield_ptr\(root-init\) [0-9]+ \(global [A-Za-z0-9_]+!\) +[A-Za-z_][A-Za-z0-9_']*/" "$tmp/$n.dump" |
    sed -E 's/setfield_ptr\(root-init\) ([0-9]+) \(global ([A-Za-z0-9_]+)!\) +(.*)\//caml\2 \1 \3/' |
    sort -k2,2n || true
  symbol="caml$(tr '[:lower:]' '[:upper:]' <<<"${n:0:1}")${n:1}"
  header="$(grep -oE "int [0-9]+ +(global \"$symbol\" +)?\"$symbol\":" "$tmp/$n.dump" | head -1 | awk '{print $2}')"
  [ -n "$header" ] || { echo "module-fields: no module block $symbol in $n's -dcmm" >&2; exit 1; }
  echo "$symbol size $((header >> 10))"
done
