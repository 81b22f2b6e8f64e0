#!/usr/bin/env bash
# Prints, for each sample, where its toplevel bindings live in the native module
# block: "SYMBOL FIELD IDENT" (e.g. "camlCache_leak 1 cache").
#
#   samples/module-fields.sh [TOOLCHAIN] [NAME...]   (see samples/build.sh)
#
# Method: ocamlopt -dlambda (closure, non-flambda mode) compiles a toplevel
# structure into stores "(setfield_ptr(root-init) FIELD (global Module!) ident/N)"
# into the static module block, whose symbol is caml<Module> (header wosize =
# number of fields). -dcmm shows the same block as (data ... "camlModule": int 1 ...).
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
  "$prefix/bin/ocamlopt" -I "$build" -I +threads -I +unix -I +dynlink -dlambda -c \
      -o "$tmp/$n.cmx" "$here/$n.ml" 2>&1 >/dev/null |
    tr '\n' ' ' |
    grep -oE "setfield_ptr\(root-init\) [0-9]+ \(global [A-Za-z0-9_]+!\) +[A-Za-z_][A-Za-z0-9_']*/" |
    sed -E 's/setfield_ptr\(root-init\) ([0-9]+) \(global ([A-Za-z0-9_]+)!\) +(.*)\//caml\2 \1 \3/' |
    sort -k2,2n
done
