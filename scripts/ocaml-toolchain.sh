#!/usr/bin/env bash
# Makes one OCaml toolchain available and prints its install prefix on stdout.
#
#   scripts/ocaml-toolchain.sh [TOOLCHAIN]
#
# TOOLCHAIN (default 5.3.0) is a toolchain of the registry, releases.tsv at the repository's
# root, which says its OCaml version, where its source comes from (npm:PACKAGE@VERSION from the
# npm registry, e.g. ocaml@5.1.4 which holds 5.1.0; or file:TARBALL in ../shared/sources,
# checksum verified) and its extra configure flags (the -rhb16 toolchains:
# --enable-reserved-header-bits=16, 4.14's profinfo bits). `std` and `rhb16` are older names of
# 5.3.0 and 5.3.0-rhb16.
#
# Exit status 3 means the toolchain's source is not available on this machine (5.2.0 without
# ../shared/sources); callers say plainly that it was not covered.
#
# A toolchain is built once and cached outside the repository, in
# ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/ocaml-TOOLCHAIN. Only what heapsnap's tests need is
# built (no ocamldoc, debugger, ocamltest, debug runtime or man pages); the .cmt/.cmti files
# are installed, because heapsnap reads types from them.
#
# Races: every build of one toolchain holds an exclusive flock on its lock file, so two
# concurrent runs build it once. A failed build never looks complete: the prefix only counts
# once the `.heapsnap-complete` stamp is written, after `make install`.
set -euo pipefail

toolchain="${1:-5.3.0}"
case "$toolchain" in
  std) toolchain=5.3.0 ;;
  rhb16) toolchain=5.3.0-rhb16 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
shared_sources="$here/../../shared/sources"
if ! version="$("$here/releases.sh" get "$toolchain" version 2>/dev/null)"; then
  echo "ocaml-toolchain: unknown toolchain '$toolchain' (expected: $("$here/releases.sh" toolchains | paste -sd, - | sed 's/,/, /g'))" >&2
  exit 2
fi
origin="$("$here/releases.sh" get "$toolchain" origin)"
configure_extra=()
configure="$("$here/releases.sh" get "$toolchain" configure)"
[ "$configure" = - ] || IFS=, read -r -a configure_extra <<<"$configure"

cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}"
prefix="$cache/ocaml-$toolchain"
stamp="$prefix/.heapsnap-complete"
mkdir -p "$cache"

if [ -f "$stamp" ]; then echo "$prefix"; exit 0; fi

if [ "${origin%%:*}" = file ] && [ ! -f "$shared_sources/${origin#file:}" ]; then
  echo "ocaml-toolchain: OCaml $version's source ($shared_sources/${origin#file:}) is not on this machine" >&2
  exit 3
fi

exec 9>"$prefix.lock"
flock 9
# Another run may have finished while we waited for the lock.
if [ -f "$stamp" ]; then echo "$prefix"; exit 0; fi

for tool in npm make cc tar sha256sum; do
  command -v "$tool" >/dev/null || { echo "ocaml-toolchain: '$tool' is required" >&2; exit 1; }
done

rm -rf "$prefix"
work="$(mktemp -d "$cache/build-$toolchain.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "ocaml-toolchain: building OCaml $toolchain into $prefix (a few minutes; log in $work/build.log)" >&2
(
  cd "$work"
  case "$origin" in
    npm:*)
      npm pack --silent "${origin#npm:}" >/dev/null
      tar xzf ocaml-*.tgz
      ;;
    file:*)
      archive="${origin#file:}"
      (cd "$shared_sources" && grep " $archive\$" SHA256SUMS | sha256sum -c --quiet -)
      mkdir package
      tar xzf "$shared_sources/$archive" -C package --strip-components=1
      ;;
  esac
  cd package
  actual="$(head -n1 VERSION)"
  [ "${actual%%+*}" = "$version" ] || { echo "source says OCaml $actual, expected $version" >&2; exit 1; }
  ./configure --prefix="$prefix" --disable-ocamldoc --disable-ocamltest --disable-debugger \
    --disable-debug-runtime --disable-stdlib-manpages --enable-installing-source-artifacts \
    "${configure_extra[@]}"
  # 4.14.0's configure.ac sets `with_profinfo` but tests `profinfo`, so
  # --enable-reserved-header-bits sets PROFINFO_WIDTH without WITH_PROFINFO: neither the
  # runtime nor the compiler (Config.profinfo) mask the bits. Set both, as a fixed configure
  # would (the runtime alone would crash the programs the compiler builds).
  if [ "$version" = 4.14.0 ] && grep -q '^#define PROFINFO_WIDTH [1-9]' runtime/caml/m.h; then
    sed -i 's|^/\* #undef WITH_PROFINFO \*/$|#define WITH_PROFINFO 1|' runtime/caml/m.h
    sed -i 's|^WITH_PROFINFO=false$|WITH_PROFINFO=true|' Makefile.config
    grep -q '^#define WITH_PROFINFO 1' runtime/caml/m.h && grep -q '^WITH_PROFINFO=true' Makefile.config ||
      { echo "could not enable WITH_PROFINFO" >&2; exit 1; }
  fi
  make -j"$(nproc)"
  make install
) >"$work/build.log" 2>&1 || {
  echo "ocaml-toolchain: build of $toolchain failed; last lines of the log:" >&2
  tail -n 40 "$work/build.log" >&2
  rm -rf "$prefix"
  exit 1
}
"$prefix/bin/ocamlopt" -version >/dev/null
touch "$stamp"
echo "$prefix"
