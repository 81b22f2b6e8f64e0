#!/usr/bin/env bash
# The corpus of real OCaml programs' snapshots the benches use (issues 26 and 27): dune building
# a generated 400-module project, dumped at 15 s, 40 s and 70 s, and menhir generating a parser
# for OCaml's own grammar, dumped at 3 s; every snapshot named and typed by `heapsnap annotate`.
#
#   scripts/real-snapshots.sh --dune EXE [--dune-cmt DIR]... --menhir EXE [--menhir-cmt DIR]... OUT_DIR
#   scripts/real-snapshots.sh --dune EXE OUT_DIR          # dune's three snapshots only
#   scripts/real-snapshots.sh --menhir EXE OUT_DIR        # menhir's only
#
# --dune        a dune executable compiled with -bin-annot by OCaml 5.3.0 (the snapshots' types
#               come from its .cmt files)
# --dune-cmt    where its .cmt files are (repeat it; default: the executable's directory)
# --menhir      a menhir executable, likewise
# --menhir-cmt  where its .cmt files are (repeat it; the first wins for a unit found in two;
#               default: the executable's directory, then the `_build/default` it lies in, if any)
#
# Writes, each with what typed-share.sh keeps beside it (command.log, *.dump.txt,
# *.annotate.txt):
#   OUT_DIR/dune/at-15s.heapsnap, at-40s.heapsnap, at-70s.heapsnap
#       one run of `dune build -j 2` (shared cache off) of gen-dune-project.py's 20 libraries x
#       20 modules, dumped three times; dune is killed after the third dump
#   OUT_DIR/menhir/at-3s.heapsnap, at-14s.heapsnap
#       `menhir --no-pager` on OCaml 5.2.0's parsing/parser.mly (from
#       ../shared/sources/ocaml-5.2.0.tar.gz, checksum verified), 3 s and 14 s in (the second
#       a heap the size of the benchmarks' large synthetic one, and more). --no-pager is an
#       undocumented construction mode (LR(1) states merged only where one includes the other;
#       menhir's own build uses it for its parser): on this grammar it runs about 26 s and
#       peaks near 1 GB, so 3 s in it holds millions of blocks.
#       The default construction ends in about 3.6 s (2.1M reachable blocks at 3 s, 18% typed);
#       --canonical needs 10 minutes and 7 GB and has fewer blocks at 3 s.
# and prints typed-share.sh's typed share of each. Nothing is written in the repository.
#
# The programs. Neither is fetched nor built here: their sources come from public repositories
# that this project's sessions reach only through the workplace's `fetch` tool, and a recipe
# building fetched code is not to be committed. The figures below are of:
#   dune 3.17.2: `fetch github:ocaml/dune`, tag 3.17.2 (fedec664a6ba500f94ba4558112f52d5719bed4d),
#     bootstrapped (boot/bootstrap.ml) by the 5.3.0 toolchain with -bin-annot: _boot/dune.exe,
#     its .cmt files beside it
#   menhir 20231231: `fetch github:LexiFi/menhir` (a mirror of gitlab.inria.fr/fpottier/menhir),
#     tag 20231231 (d3d815e4f554da68b8c247241c8f8678926eecaa), built by that dune in the release
#     profile: _build/default/src/stage2/main.exe, with the @check aliases of src/stage2, lib,
#     sdk and fix for the .cmt files of every module
# both kept outside the repository, under ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/real/.
#
# Figures (one run, 2 cores shared with another long build, which makes the moments vary;
# objects and MiB from `heapsnap summary`, the typed share from `heapsnap info`):
#   snapshot        objects (reachable)    heap MiB (reachable)  file MB  typed share of reachable bytes
#   dune at 15 s    1,793,148 (1,244,287)    59.8 (40.6)           84     51.4%
#   dune at 40 s    1,755,571 (1,164,613)    58.4 (37.8)           84     50.7%
#   dune at 70 s    1,826,667 (1,078,726)    60.8 (34.8)           87     50.0%
#   menhir at 3 s   5,031,233 (2,781,075)   180.1 (94.1)          197     16.2%
#   menhir at 14 s  26,695,372 (9,193,307)  650.3 (250.4)         804     10.8%  (another run, 2026-11-28)
# Menhir at 3 s is where it is in a fast-growing construction: three other runs gave 3.7M, 5.9M
# and 7.6M objects (138-298 MB files, typed 8-12%); the untyped bulk is a Hashtbl only a stack
# frame holds (Fix's DataFlow.Run), which no name reaches.
# dune's unit Dune_engine__Action_builder was left without names then (the .cmt reader gave it a
# field too many: an `open struct` rebinding an included module, since fixed); named, dune's
# snapshots are typed 68.6% (15 s), 68.9% (40 s) and 69.4% (70 s), 794 of 798 units named.
#
# The OCaml toolchain comes from scripts/ocaml-toolchain.sh 5.3.0 (built once, cached).
# HEAPSNAP names the heapsnap binary (default: ${CARGO_TARGET_DIR:-target}/release/heapsnap,
# built if missing).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: real-snapshots.sh [--dune EXE [--dune-cmt DIR]...] [--menhir EXE [--menhir-cmt DIR]...] OUT_DIR"

dune_exe="" menhir_exe="" out=""
dune_cmt=() menhir_cmt=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dune | --dune-cmt | --menhir | --menhir-cmt)
      [ $# -ge 2 ] || { echo "real-snapshots: $1 needs a value ($usage)" >&2; exit 2; }
      case "$1" in
        --dune) dune_exe="$2" ;;
        --dune-cmt) dune_cmt+=("$2") ;;
        --menhir) menhir_exe="$2" ;;
        --menhir-cmt) menhir_cmt+=("$2") ;;
      esac
      shift 2
      ;;
    -*) echo "real-snapshots: unknown option $1 ($usage)" >&2; exit 2 ;;
    *)
      [ -z "$out" ] || { echo "real-snapshots: one OUT_DIR only ($usage)" >&2; exit 2; }
      out="$1"
      shift
      ;;
  esac
done
[ -n "$out" ] || { echo "real-snapshots: no OUT_DIR given ($usage)" >&2; exit 2; }
[ -n "$dune_exe$menhir_exe" ] || { echo "real-snapshots: give --dune EXE, --menhir EXE or both ($usage)" >&2; exit 2; }

# An executable, made absolute, and its .cmt directories (defaults as the header says).
check_program() {
  local what="$1" exe="$2"
  if [ ! -f "$exe" ] || [ ! -x "$exe" ]; then echo "real-snapshots: --$what $exe is not an executable file" >&2; exit 1; fi
}
check_cmt_dirs() {
  local what="$1"; shift
  local d
  for d in "$@"; do
    [ -d "$d" ] || { echo "real-snapshots: --$what-cmt $d is not a directory" >&2; exit 1; }
  done
  if [ -z "$(find "$@" -maxdepth 4 -name '*.cmt' -print -quit)" ]; then
    echo "real-snapshots: no .cmt files in $* (to 4 levels down): $what would be left without OCaml names; compile it with -bin-annot, or say where its .cmt files are with --$what-cmt" >&2
    exit 1
  fi
}
if [ -n "$dune_exe" ]; then
  check_program dune "$dune_exe"
  dune_exe="$(realpath "$dune_exe")"
  [ ${#dune_cmt[@]} -gt 0 ] || dune_cmt=("$(dirname "$dune_exe")")
  check_cmt_dirs dune "${dune_cmt[@]}"
fi
if [ -n "$menhir_exe" ]; then
  check_program menhir "$menhir_exe"
  menhir_exe="$(realpath "$menhir_exe")"
  if [ ${#menhir_cmt[@]} -eq 0 ]; then
    menhir_cmt=("$(dirname "$menhir_exe")")
    case "$menhir_exe" in */_build/default/*) menhir_cmt+=("${menhir_exe%%/_build/default/*}/_build/default") ;; esac
  fi
  check_cmt_dirs menhir "${menhir_cmt[@]}"
fi

toolchain="$("$repo/scripts/ocaml-toolchain.sh" 5.3.0)"
export PATH="$toolchain/bin:$PATH"
export HEAPSNAP="${HEAPSNAP:-${CARGO_TARGET_DIR:-$repo/target}/release/heapsnap}"
if [ ! -x "$HEAPSNAP" ]; then
  echo "real-snapshots: building heapsnap ($HEAPSNAP)" >&2
  (cd "$repo" && cargo build --release --quiet --bin heapsnap)
  [ -x "$HEAPSNAP" ] || { echo "real-snapshots: $HEAPSNAP is still missing after cargo build (CARGO_TARGET_DIR?)" >&2; exit 1; }
fi

mkdir -p "$out"
out="$(realpath "$out")"
work="$(mktemp -d "$out/work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Each program's version must be the toolchain's: annotate reads the .cmt files with it.
same_ocaml() {
  local what="$1"; shift
  local cmt
  cmt="$(find "$@" -maxdepth 4 -name '*.cmt' -print -quit)"
  if ! "$toolchain/bin/ocamlobjinfo" "$cmt" >/dev/null 2>&1; then
    echo "real-snapshots: $cmt is not readable by OCaml $("$toolchain/bin/ocamlopt" -version) ($toolchain): build $what with that toolchain" >&2
    exit 1
  fi
}

cmt_args() { local d; for d in "$@"; do printf -- '--cmt\n%s\n' "$d"; done; }

if [ -n "$dune_exe" ]; then
  same_ocaml dune "${dune_cmt[@]}"
  echo "real-snapshots: dune building a generated project of 20 libraries x 20 modules, dumped at 15, 40 and 70 s" >&2
  rm -rf "$out/dune"
  "$repo/scripts/gen-dune-project.py" 20 20 "$work/project"
  mapfile -t args < <(cmt_args "${dune_cmt[@]}")
  # --root: dune must not look above the project for a workspace; the shared cache would turn a
  # second run into copies.
  DUNE_CACHE=disabled "$repo/scripts/typed-share.sh" --at 15,40,70 --dir "$out/dune" "${args[@]}" --ocaml "$toolchain" \
    -- "$dune_exe" build --root "$work/project" -j 2
  for m in 15 40 70; do
    [ -s "$out/dune/at-${m}s.heapsnap" ] || { echo "real-snapshots: dune's snapshot at ${m}s is missing (see $out/dune)" >&2; exit 1; }
  done
fi

if [ -n "$menhir_exe" ]; then
  same_ocaml menhir "${menhir_cmt[@]}"
  sources="$repo/../shared/sources"
  [ -f "$sources/ocaml-5.2.0.tar.gz" ] || { echo "real-snapshots: menhir's grammar comes from $sources/ocaml-5.2.0.tar.gz, which is not on this machine" >&2; exit 1; }
  (cd "$sources" && grep ' ocaml-5.2.0.tar.gz$' SHA256SUMS | sha256sum -c --quiet -)
  mkdir -p "$work/menhir"
  tar -xzf "$sources/ocaml-5.2.0.tar.gz" -C "$work/menhir" --strip-components=2 ocaml-5.2.0/parsing/parser.mly
  echo "real-snapshots: menhir --no-pager on OCaml 5.2.0's parser.mly, dumped at 3 s and 14 s" >&2
  rm -rf "$out/menhir"
  mapfile -t args < <(cmt_args "${menhir_cmt[@]}")
  "$repo/scripts/typed-share.sh" --at 3,14 --dir "$out/menhir" "${args[@]}" --ocaml "$toolchain" \
    -- "$menhir_exe" --no-pager --base "$work/menhir/parser" "$work/menhir/parser.mly"
  for m in 3 14; do
    [ -s "$out/menhir/at-${m}s.heapsnap" ] || { echo "real-snapshots: menhir's snapshot at ${m}s is missing (see $out/menhir)" >&2; exit 1; }
  done
fi

for snap in "$out"/dune/at-*s.heapsnap "$out"/menhir/at-*s.heapsnap; do
  [ -f "$snap" ] || continue
  objects="$("$HEAPSNAP" summary "$snap" | awk '$1 == "objects" { o = $2 } $1 == "reachable" { r = $2 } END { print o " (" r " reachable)" }')"
  echo "$snap: $objects objects, $(du -m "$snap" | cut -f1) MB"
done
