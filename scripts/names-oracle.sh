#!/usr/bin/env bash
# The names oracle (issue 53): compiles every unit of a program again, as its .cmt says it was
# compiled, with -drawlambda, and compares the identifier the compiler stores in each field of
# the unit's module block (`setfield_ptr(root-init) N (global Unit!) ident/stamp`) with the name
# heapsnap's .cmt reader gives that field. Prints one line per field named wrongly, per unit left
# unnamed (its interface not found: visibly unknown) and per unit not compared (its source or
# build directory gone, a generated source, a unit compiled by ocamlc), then the totals; exits 1
# when a field is named wrongly.
#
#   scripts/names-oracle.sh --ocaml PREFIX [--remap FROM=TO]... [-I DIR]... [--json] CMT_OR_DIR...
#
# --ocaml   the program's toolchain (its version must be the .cmt files')
# --remap   a build directory that moved: FROM (as the .cmt records it) is TO on this machine
# -I        a directory added to every compilation's load path (the OCaml compiler's own units,
#           whose build tree is gone: its installed compiler-libs and standard library)
# CMT_OR_DIR .cmt files, or directories searched for them
#
# Examples (the figures in the closing notes of issue 53 come from these):
#   scripts/names-oracle.sh --ocaml ~/.cache/heapsnap/ocaml-5.3.0 DUNE/_boot
#   scripts/names-oracle.sh --ocaml ~/.cache/heapsnap/ocaml-5.3.0 MENHIR/_build/default/src
#   scripts/names-oracle.sh --ocaml P --remap BUILDDIR=SRC -I P/lib/ocaml/compiler-libs -I P/lib/ocaml P/lib/ocaml/compiler-libs
#
# Figures (2026-11-29, OCaml 5.3.0, every unit compiled by ocamlopt; "not compared": units
# compiled by ocamlc, or whose generated source the release's tarball lacks):
#   program                                    units compared   fields agreed   named wrongly
#   the compiler (compiler-libs and stdlib)    577 of 621        22,905          0
#   dune 3.17.2, bootstrapped (_boot)          828 of 828        19,587          0
#   menhir 20231231 (_build/default)           345 of 418         5,806          0
#   findlib 1.9.8 (src/)                        15 of 16             433          0
#   ocamlbuild 0.16.1 (src/: mostly ocamlc's)    3 of 48              81          0
# Before this change, menhir's Lr1 (its interface in byte/, its .cmt in native/) had 119 of
# 129 fields named wrongly; now every unit of menhir's is named from its interface.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cargo build -q --release --manifest-path "$repo/Cargo.toml" -p heapsnap-names --bin heapsnap-names-oracle
exec "${CARGO_TARGET_DIR:-$repo/target}/release/heapsnap-names-oracle" "$@"
