#!/usr/bin/env bash
# Builds an OCaml 5.3.0 runtime altered on purpose, and a few samples linked against it, for the
# tests of probing (issue 32): heapsnap must read each one right or refuse it naming the fact
# that differs, never write a wrong snapshot silently. Prints the directory of the samples.
#
#   scripts/altered-runtime.sh VARIANT
#
# VARIANT, each a small patch of the runtime alone (the compiler, the standard library and the
# samples' code are the 5.3.0 toolchain's):
#   pool-size            pools of 8192 words instead of 4096 (runtime/caml/sizeclasses.h,
#                        its wasted words recomputed)
#   domain-field         a member added to caml_domain_state after dls_root, in the middle
#                        of the structure (after every member compiled OCaml code reads but
#                        extra_params)
#   continuation-field   continuations promoted to the major heap get a third field
#                        (runtime/minor_gc.c)
#   header-bits          8 reserved header bits in the runtime (runtime/caml/m.h) without
#                        configure's --enable-reserved-header-bits, which the compiler would
#                        have been told of
#
# Only the runtime library is rebuilt (`make runtime/libasmrun.a` in a configured 5.3.0 source
# tree, cached), then installed as libasmrun_VARIANT.a beside the samples, which are linked
# with `-runtime-variant _VARIANT`. The samples (cache_leak, effect_cont, long_list) use neither
# systhreads nor unix, whose C stubs were compiled against the unaltered runtime's headers.
#
# Everything is cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/altered-5.3.0/, outside the
# repository; a variant is rebuilt when this script or the samples change. Exit status 3: the
# 5.3.0 toolchain cannot be built here.
set -euo pipefail

variant="${1:-}"
case "$variant" in
  pool-size | domain-field | continuation-field | header-bits) ;;
  *) echo "usage: scripts/altered-runtime.sh pool-size|domain-field|continuation-field|header-bits" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$here/.."
prefix="$("$here/ocaml-toolchain.sh" 5.3.0)" || exit $?
cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/altered-5.3.0"
out="$cache/$variant"
samples=(cache_leak effect_cont long_list)
mkdir -p "$cache"

up_to_date() {
  local s
  for s in "${samples[@]}"; do
    [ "$out/$s" -nt "${BASH_SOURCE[0]}" ] && [ "$out/$s" -nt "$repo/samples/$s.ml" ] &&
      [ "$out/$s" -nt "$repo/samples/heapsnap_sample.ml" ] || return 1
  done
}
if up_to_date; then echo "$out"; exit 0; fi

exec 9>"$cache/.lock"
flock 9
if up_to_date; then echo "$out"; exit 0; fi

# A configured 5.3.0 source tree, made once.
source_tree="$cache/source"
if [ ! -f "$source_tree/.heapsnap-configured" ]; then
  rm -rf "$source_tree"
  mkdir -p "$source_tree"
  echo "altered-runtime: configuring OCaml 5.3.0's source in $source_tree" >&2
  (
    cd "$source_tree"
    npm pack --silent ocaml@5.3.0 >/dev/null
    tar xzf ocaml-*.tgz
    rm -f ocaml-*.tgz
    cd package
    ./configure --prefix="$prefix" --disable-ocamldoc --disable-ocamltest --disable-debugger \
      --disable-debug-runtime --disable-stdlib-manpages >configure.log 2>&1
  ) || { echo "altered-runtime: configure failed (see $source_tree/package/configure.log)" >&2; exit 1; }
  touch "$source_tree/.heapsnap-configured"
fi

work="$(mktemp -d "$cache/build-$variant.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -a "$source_tree/package/." "$work/"

# Each patch must change what it means to change, or the build fails.
patch_runtime() {
  python3 - "$work" "$variant" <<'PY'
import re, sys
root, variant = sys.argv[1], sys.argv[2]

def edit(path, old, new, count=1):
    p = f"{root}/{path}"
    s = open(p).read()
    if s.count(old) != count:
        sys.exit(f"altered-runtime: {path}: expected {count} of {old!r}, found {s.count(old)}")
    open(p, "w").write(s.replace(old, new))

if variant == "pool-size":
    p = f"{root}/runtime/caml/sizeclasses.h"
    s = open(p).read()
    header = int(re.search(r"#define POOL_HEADER_WSIZE (\d+)", s).group(1))
    wsize = [int(x) for x in re.search(r"wsize_sizeclass\[NUM_SIZECLASSES\] =\s*\{([^}]*)\}", s).group(1).split(",")]
    wastage = [(8192 - header) % w for w in wsize]
    s = s.replace("#define POOL_WSIZE 4096", "#define POOL_WSIZE 8192")
    s, n = re.subn(r"(wastage_sizeclass\[NUM_SIZECLASSES\] =\s*)\{[^}]*\}", lambda m: m.group(1) + "{ " + ", ".join(map(str, wastage)) + " }", s)
    if n != 1 or "#define POOL_WSIZE 8192" not in s:
        sys.exit("altered-runtime: sizeclasses.h is not as expected")
    open(p, "w").write(s)
elif variant == "domain-field":
    edit("runtime/caml/domain_state.tbl", "DOMAIN_STATE(value, dls_root)\n",
         "DOMAIN_STATE(value, dls_root)\n\nDOMAIN_STATE(uintnat, heapsnap_inserted_member)\n")
elif variant == "continuation-field":
    edit("runtime/minor_gc.c", "result = alloc_shared(st->domain, 2, Cont_tag, Reserved_hd(hd));",
         "result = alloc_shared(st->domain, 3, Cont_tag, Reserved_hd(hd));")
    edit("runtime/minor_gc.c", "      Field(result, 1) = Field(v, 1);\n",
         "      Field(result, 1) = Field(v, 1);\n      Field(result, 2) = Val_unit;\n")
    edit("runtime/minor_gc.c", "*Hp_val(result) = Make_header(1, No_scan_tag,", "*Hp_val(result) = Make_header(2, No_scan_tag,")
elif variant == "header-bits":
    edit("runtime/caml/m.h", "#define HEADER_RESERVED_BITS 0", "#define HEADER_RESERVED_BITS 8")
PY
}

echo "altered-runtime: building the $variant runtime (log in $work/build.log)" >&2
(
  patch_runtime
  make -C "$work" -j"$(nproc)" runtime/libasmrun.a
) >"$work/build.log" 2>&1 || {
  echo "altered-runtime: build of $variant failed; last lines of the log:" >&2
  tail -n 30 "$work/build.log" >&2
  exit 1
}

staging="$(mktemp -d "$cache/out-$variant.XXXXXX")"
cp "$work/runtime/libasmrun.a" "$staging/libasmrun_$variant.a"
ocamlopt="$prefix/bin/ocamlopt"
(
  cd "$staging"
  "$ocamlopt" -g -c -o heapsnap_sample.cmx "$repo/samples/heapsnap_sample.ml"
  for s in "${samples[@]}"; do
    "$ocamlopt" -g -I . -c -o "$s.cmx" "$repo/samples/$s.ml"
    "$ocamlopt" -g -I . -runtime-variant "_$variant" heapsnap_sample.cmx "$s.cmx" -o "$s"
  done
  rm -f ./*.cm* ./*.o
) >"$work/link.log" 2>&1 || {
  echo "altered-runtime: linking the $variant samples failed:" >&2
  tail -n 30 "$work/link.log" >&2
  rm -rf "$staging"
  exit 1
}
rm -rf "$out"
mv "$staging" "$out"
echo "$out"
