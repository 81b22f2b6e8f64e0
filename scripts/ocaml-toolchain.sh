#!/usr/bin/env bash
# Makes OCaml 5.3.0 available and prints its install prefix on stdout.
#
#   scripts/ocaml-toolchain.sh            # the standard toolchain
#   scripts/ocaml-toolchain.sh rhb16      # configured with --enable-reserved-header-bits=16
#
# The compiler source comes from the npm registry package ocaml@5.3.0 (`npm pack`).
# It is built once and cached outside the repository, in
# ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/ocaml-5.3.0[-rhb16].
#
# Races: every build of one variant holds an exclusive flock on the variant's lock file,
# so two concurrent runs build it once. A failed build never looks complete: the
# prefix only counts once the `.heapsnap-complete` stamp is written, after `make install`.
set -euo pipefail

OCAML_VERSION=5.3.0
variant="${1:-std}"
case "$variant" in
  std) suffix=""; configure_extra=() ;;
  rhb16) suffix="-rhb16"; configure_extra=(--enable-reserved-header-bits=16) ;;
  *) echo "ocaml-toolchain: unknown variant '$variant' (expected: std, rhb16)" >&2; exit 2 ;;
esac

cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}"
prefix="$cache/ocaml-$OCAML_VERSION$suffix"
stamp="$prefix/.heapsnap-complete"
mkdir -p "$cache"

if [ -f "$stamp" ]; then echo "$prefix"; exit 0; fi

exec 9>"$prefix.lock"
flock 9
# Another run may have finished while we waited for the lock.
if [ -f "$stamp" ]; then echo "$prefix"; exit 0; fi

for tool in npm make cc tar; do
  command -v "$tool" >/dev/null || { echo "ocaml-toolchain: '$tool' is required" >&2; exit 1; }
done

rm -rf "$prefix"
work="$(mktemp -d "$cache/build$suffix.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "ocaml-toolchain: building OCaml $OCAML_VERSION$suffix into $prefix (a few minutes; log in $work/build.log)" >&2
(
  cd "$work"
  npm pack --silent "ocaml@$OCAML_VERSION" >/dev/null
  tar xzf "ocaml-$OCAML_VERSION.tgz"
  cd package
  ./configure --prefix="$prefix" "${configure_extra[@]}"
  make -j"$(nproc)"
  make install
) >"$work/build.log" 2>&1 || {
  echo "ocaml-toolchain: build failed; last lines of the log:" >&2
  tail -n 40 "$work/build.log" >&2
  rm -rf "$prefix"
  exit 1
}
"$prefix/bin/ocamlopt" -version >/dev/null
touch "$stamp"
echo "$prefix"
