#!/usr/bin/env bash
# Reads the registry of supported OCaml releases (releases.tsv at the repository's root), so
# that no script keeps a list of its own.
#
#   scripts/releases.sh toolchains [FAMILY]     every toolchain name (of FAMILY: ocaml5, ocaml4), in the file's order
#   scripts/releases.sh get TOOLCHAIN COLUMN    one column of a toolchain's line ("-" for none)
#   scripts/releases.sh has TOOLCHAIN FEATURE   exit status 0 when the toolchain's release has FEATURE
#
# COLUMN is a name of the header line (toolchain, version, family, origin, configure, pools,
# cmt, features). An unknown toolchain or column is exit status 2, with a message on stderr.
set -euo pipefail
registry="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/releases.tsv"

# The registry's lines without comments and blank lines, the header first.
rows() { grep -v -e '^#' -e '^[[:space:]]*$' "$registry"; }

get() {
  local toolchain="$1" column="$2"
  rows | awk -F'\t' -v tc="$toolchain" -v col="$column" '
    NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; if (!c) { print "releases.sh: no column " col > "/dev/stderr"; exit 2 } next }
    $1 == tc { print $c; found = 1 }
    END { if (c && !found) { print "releases.sh: unknown toolchain " tc > "/dev/stderr"; exit 2 } }'
}

case "${1:-}" in
  toolchains)
    rows | awk -F'\t' -v family="${2:-}" 'NR > 1 && (family == "" || $3 == family) { print $1 }'
    ;;
  get)
    [ $# -eq 3 ] || { echo "usage: scripts/releases.sh get TOOLCHAIN COLUMN" >&2; exit 2; }
    get "$2" "$3"
    ;;
  has)
    [ $# -eq 3 ] || { echo "usage: scripts/releases.sh has TOOLCHAIN FEATURE" >&2; exit 2; }
    features="$(get "$2" features)"
    case ",$features," in *",$3,"*) exit 0 ;; *) exit 1 ;; esac
    ;;
  *)
    echo "usage: scripts/releases.sh toolchains [FAMILY] | get TOOLCHAIN COLUMN | has TOOLCHAIN FEATURE" >&2
    exit 2
    ;;
esac
