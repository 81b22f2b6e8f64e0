#!/usr/bin/env bash
# Builds the OCaml programs heapsnap-memtrace's tests run, with Jane Street's memtrace compiled
# from ../shared/sources (no dune, no opam), and prints the directory that holds them:
#   memtrace_sample   samples/memtrace_sample.ml linked with memtrace
#   dump_trace        memtrace's own bin/dump_trace.ml: the reference decoder for our reader
#   alloc_sites_memtrace  samples/alloc_sites.ml (with the samples' pause protocol) traced by
#                     memtrace (samples/alloc_sites_memtrace.ml), for heapsnap's --memtrace tests
#   lib/memtrace/     memtrace installed as ocamlfind installs a package (META, .cmi, .cmx,
#                     .cmxa, and the .cmt files, which are nowhere else): where heapsnap's names
#                     of installed libraries are found
#
#   memtrace/scripts/build-ocaml-programs.sh
#
# Exit status 3: memtrace's source (or the toolchain's) is not on this machine.
# The build is cached outside the repository, in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/memtrace-KEY,
# where KEY hashes the memtrace archive, the sample, this script and the compiler's version.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
sources="$repo/../shared/sources"
archive=memtrace-a88470c.tar.gz
sample="$repo/samples/memtrace_sample.ml"
site_sources=("$repo/samples/heapsnap_sample.ml" "$repo/samples/alloc_sites_memtrace.ml" "$repo/samples/alloc_sites.ml")

if [ ! -f "$sources/$archive" ]; then
  echo "build-ocaml-programs: memtrace's source ($sources/$archive) is not on this machine" >&2
  exit 3
fi
(cd "$sources" && grep " $archive\$" SHA256SUMS | sha256sum -c --quiet -) || {
  echo "build-ocaml-programs: $sources/$archive does not match SHA256SUMS" >&2
  exit 1
}

status=0
prefix="$("$repo/scripts/ocaml-toolchain.sh" 5.3.0)" || status=$?
[ "$status" -eq 0 ] || exit "$status"
ocamlopt="$prefix/bin/ocamlopt"

key="$( { sha256sum "$sources/$archive" "$sample" "${site_sources[@]}" "${BASH_SOURCE[0]}" | cut -d' ' -f1; "$ocamlopt" -version; echo "$prefix"; } | sha256sum | cut -c1-16)"
cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}"
out="$cache/memtrace-$key"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi

mkdir -p "$cache"
exec 7>"$out.lock"
flock 7
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi

echo "build-ocaml-programs: building memtrace and the test programs in $out" >&2
rm -rf "$out"
mkdir -p "$out/build"
tar xzf "$sources/$archive" -C "$out/build" --strip-components=1
src="$out/build/src"
flags=(-g -I +unix -I +threads -I "$src")
(
  cd "$src"
  # Compile interfaces and implementations in dependency order, as dune would.
  order=$("$prefix/bin/ocamldep" -sort ./*.mli ./*.ml)
  for f in $order; do "$ocamlopt" "${flags[@]}" -bin-annot -c "$f"; done
  cmx=()
  for f in $order; do case "$f" in *.ml) cmx+=("${f%.ml}.cmx") ;; esac; done
  "$ocamlopt" "${flags[@]}" -a "${cmx[@]}" -o memtrace.cmxa
  # Installed as `ocamlfind install` would; the build tree keeps no .cmt (opam removes it).
  mkdir -p "$out/lib/memtrace"
  printf 'version = "a88470c"\ndescription = "memtrace"\narchive(native) = "memtrace.cmxa"\n' >"$out/lib/memtrace/META"
  cp ./*.cmi ./*.cmx memtrace.cmxa memtrace.a "$out/lib/memtrace/"
  mv ./*.cmt ./*.cmti "$out/lib/memtrace/"
)
libs=(unix.cmxa threads.cmxa "$src/memtrace.cmxa")
"$ocamlopt" "${flags[@]}" "${libs[@]}" "$out/build/bin/dump_trace.ml" -o "$out/dump_trace"
# Compiled from a copy (nothing is written next to samples/), so the debug info names memtrace_sample.ml.
cp "$sample" "$out/build/memtrace_sample.ml"
(cd "$out/build" && "$ocamlopt" "${flags[@]}" "${libs[@]}" memtrace_sample.ml -o "$out/memtrace_sample")
cp "${site_sources[@]}" "$out/build/"
(cd "$out/build" && "$ocamlopt" "${flags[@]}" "${libs[@]}" heapsnap_sample.ml alloc_sites_memtrace.ml alloc_sites.ml -o "$out/alloc_sites_memtrace")
touch "$out/.complete"
echo "$out"
