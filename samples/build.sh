#!/usr/bin/env bash
# Builds the heapsnap sample programs with one OCaml toolchain.
#
#   samples/build.sh [TOOLCHAIN]      (default: 5.3.0; see scripts/ocaml-toolchain.sh)
#
# The toolchain comes from scripts/ocaml-toolchain.sh TOOLCHAIN (built on first use; exit
# status 3, passed on, when its source is not on this machine).
# Executables go to ${HEAPSNAP_SAMPLES_DIR:-<repo>/target/samples}/TOOLCHAIN/NAME;
# intermediate files go to ${HEAPSNAP_SAMPLES_DIR:-<repo>/target/samples}/.build/TOOLCHAIN.
# Up-to-date executables are not rebuilt. Progress goes to stderr; the output
# directory is printed on stdout.
#   every toolchain : every sample except reserved_bits
#   *-rhb16         : reserved_bits too (it needs 16 reserved header bits)
#   without effects : not effect_cont, and without domains: not domains_shared (what the
#                     registry, releases.tsv, says of the release: OCaml 4.14 has neither)
# Plugins (ocamlopt -shared) go next to the executables as NAME.cmxs: dynlink_plugin
# loads plugin_data.cmxs from its own directory.
set -euo pipefail

variant="${1:-5.3.0}"
case "$variant" in
  std) variant=5.3.0 ;;
  rhb16) variant=5.3.0-rhb16 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
releases="$repo/scripts/releases.sh"
if ! "$releases" get "$variant" version >/dev/null 2>&1; then
  echo "samples/build.sh: unknown toolchain '$variant' (expected: $("$releases" toolchains | paste -sd, - | sed 's/,/, /g'))" >&2
  exit 2
fi
status=0
prefix="$("$repo/scripts/ocaml-toolchain.sh" "$variant")" || status=$?
[ "$status" -eq 0 ] || exit "$status"
export PATH="$prefix/bin:$PATH"
ocamlopt="$prefix/bin/ocamlopt"

root="${HEAPSNAP_SAMPLES_DIR:-$repo/target/samples}"
out="$root/$variant"
build="$root/.build/$variant"
mkdir -p "$out" "$build"

# Serialise concurrent builds of the same variant.
exec 8>"$root/.build/$variant.lock"
flock 8

# name | extra link flags | C stub (or -)
samples=(
  "cache_leak||-"
  "closure_list||-"
  "effect_cont||-"
  "systhread_stack|threads|-"
  "domains_shared||-"
  "weak_ephemeron||-"
  "bigarray_sample||-"
  "lazy_sample||-"
  "objects_sample||-"
  "long_list||-"
  "large_array||-"
  "large_heap||-"
  "steady_state||-"
  "dynlink_plugin|dynlink|-"
  "alloc_sites||-"
  "typed_values||-"
  "closure_shapes||-"
  "memory_growth|unix|-"
)
# Plugins: NAME.ml compiled against Heapsnap_sample's interface into NAME.cmxs.
plugins=(plugin_data)
case "$variant" in
  *-rhb16) samples+=("reserved_bits||reserved_bits_stubs.c") ;;
esac
# What the release lacks, its samples are not built for.
without=()
"$releases" has "$variant" effects || without+=(effect_cont)
"$releases" has "$variant" domains || without+=(domains_shared)
kept=()
for entry in "${samples[@]}"; do
  case " ${without[*]} " in *" ${entry%%|*} "*) ;; *) kept+=("$entry") ;; esac
done
samples=("${kept[@]}")

flags=(-g -bin-annot)
# The .cmt files (-bin-annot: OCaml names for heapsnap, issue 17) go to $build/cmt, away from
# the directory the line tables name: tests give them with --cmt, so that other dumps of the
# samples stay without names.
mkdir -p "$build/cmt"
keep_cmt() { mv -f "$build"/*.cmt "$build/cmt/" 2>/dev/null || true; }
common_deps=("$here/heapsnap_sample.ml" "$here/build.sh" "$ocamlopt")

newer_than_all() { # target deps...
  local t="$1"; shift
  [ -e "$t" ] || return 1
  local d
  for d in "$@"; do [ "$t" -nt "$d" ] || return 1; done
}

# Sources are compiled in place (absolute paths, so the debug info and DWARF
# line tables name samples/NAME.ml) with every output redirected to $build.
if ! newer_than_all "$build/heapsnap_sample.cmx" "${common_deps[@]}"; then
  echo "samples: [$variant] compiling heapsnap_sample" >&2
  (cd "$build" && "$ocamlopt" "${flags[@]}" -c -o "$build/heapsnap_sample.cmx" "$here/heapsnap_sample.ml")
  keep_cmt
fi

built=0
for entry in "${samples[@]}"; do
  IFS='|' read -r name libs stub <<<"$entry"
  deps=("$here/$name.ml" "${common_deps[@]}")
  [ "$stub" != - ] && deps+=("$here/$stub")
  if newer_than_all "$out/$name" "${deps[@]}"; then
    continue
  fi
  echo "samples: [$variant] building $name" >&2
  inc=(-I "$build")
  libargs=()
  if [ "$libs" = threads ]; then
    inc+=(-I +threads -I +unix)
    libargs=(unix.cmxa threads.cmxa)
  elif [ "$libs" = unix ]; then
    inc+=(-I +unix)
    libargs=(unix.cmxa)
  elif [ "$libs" = dynlink ]; then
    inc+=(-I +dynlink)
    libargs=(dynlink.cmxa)
  fi
  objs=()
  if [ "$stub" != - ]; then
    # ocamlopt hands .c files to the C compiler (with -I of the runtime headers);
    # the object file lands in the current directory, i.e. $build.
    (cd "$build" && "$ocamlopt" "${flags[@]}" -c "$here/$stub")
    objs+=("$build/${stub%.c}.o")
  fi
  (cd "$build" &&
     "$ocamlopt" "${flags[@]}" "${inc[@]}" -c -o "$build/$name.cmx" "$here/$name.ml" &&
     "$ocamlopt" "${flags[@]}" "${inc[@]}" "${libargs[@]}" "$build/heapsnap_sample.cmx" \
       "$build/$name.cmx" "${objs[@]}" -o "$build/$name.exe")
  keep_cmt
  mv -f "$build/$name.exe" "$out/$name"   # atomic replace
  built=$((built + 1))
done
for name in "${plugins[@]}"; do
  if newer_than_all "$out/$name.cmxs" "$here/$name.ml" "${common_deps[@]}"; then
    continue
  fi
  echo "samples: [$variant] building plugin $name.cmxs" >&2
  (cd "$build" &&
     "$ocamlopt" "${flags[@]}" -I "$build" -c -o "$build/$name.cmx" "$here/$name.ml" &&
     "$ocamlopt" "${flags[@]}" -shared "$build/$name.cmx" -o "$build/$name.cmxs")
  keep_cmt
  mv -f "$build/$name.cmxs" "$out/$name.cmxs"   # atomic replace
  built=$((built + 1))
done
# The same programs as bytecode (`ocamlc -g -bin-annot`), in $out/bytecode: every sample that
# needs neither C stubs nor native plugins; plus cache_leak linked with the interpreter
# (-custom and -output-complete-exe) and systhread_stack with it and systhreads (-custom). Their .cmt files are kept
# apart, in $build/bytecode/cmt.
ocamlc="$prefix/bin/ocamlc"
bout="$out/bytecode"
bbuild="$build/bytecode"
mkdir -p "$bout" "$bbuild/cmt"
keep_bytecode_cmt() { mv -f "$bbuild"/*.cmt "$bbuild/cmt/" 2>/dev/null || true; }
bytecode_deps=("$here/heapsnap_sample.ml" "$here/build.sh" "$ocamlc")
if ! newer_than_all "$bbuild/heapsnap_sample.cmo" "${bytecode_deps[@]}"; then
  (cd "$bbuild" && "$ocamlc" "${flags[@]}" -c -o "$bbuild/heapsnap_sample.cmo" "$here/heapsnap_sample.ml")
  keep_bytecode_cmt
fi
bytecode_built=0
link_bytecode() { # name output extra-flags...
  local name=$1 output=$2; shift 2
  local inc=(-I "$bbuild") libargs=()
  if [ "$name" = systhread_stack ]; then
    inc+=(-I +threads -I +unix)
    libargs=(unix.cma threads.cma)
  elif [ "$name" = memory_growth ]; then
    inc+=(-I +unix)
    libargs=(unix.cma)
  fi
  if newer_than_all "$bout/$output" "$here/$name.ml" "${bytecode_deps[@]}"; then
    return
  fi
  echo "samples: [$variant] building bytecode $output" >&2
  (cd "$bbuild" &&
     "$ocamlc" "${flags[@]}" "${inc[@]}" -c -o "$bbuild/$name.cmo" "$here/$name.ml" &&
     "$ocamlc" "${flags[@]}" "${inc[@]}" "$@" "${libargs[@]}" "$bbuild/heapsnap_sample.cmo" "$bbuild/$name.cmo" -o "$bbuild/$output.out")
  keep_bytecode_cmt
  mv -f "$bbuild/$output.out" "$bout/$output"
  bytecode_built=$((bytecode_built + 1))
}
for entry in "${samples[@]}"; do
  IFS='|' read -r name libs stub <<<"$entry"
  [ "$stub" = - ] && [ "$libs" != dynlink ] || continue
  link_bytecode "$name" "$name"
done
link_bytecode cache_leak cache_leak.custom -custom
link_bytecode cache_leak cache_leak.complete -output-complete-exe
link_bytecode systhread_stack systhread_stack.custom -custom
echo "samples: [$variant] $bytecode_built bytecode programs built in $bout" >&2
echo "samples: [$variant] $built built, $(( ${#samples[@]} + ${#plugins[@]} - built )) up to date in $out" >&2
echo "$out"
