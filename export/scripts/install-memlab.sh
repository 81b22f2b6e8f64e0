#!/usr/bin/env bash
# Installs memlab's heap parser (@memlab/core and @memlab/heap-analysis, pinned) from the npm
# registry into ${HEAPSNAP_CACHE:-~/.cache/heapsnap}/memlab, once, and prints that directory.
# No browser is downloaded (PUPPETEER_SKIP_DOWNLOAD) and no install script runs: the heap
# parser needs neither. The tests and the benchmark of heapsnap-export call this.
set -euo pipefail
VERSION=2.0.5
dir="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/memlab"
stamp="$dir/.installed-$VERSION"
if [[ ! -f "$stamp" ]]; then
    # Tests that run at once call this together: one installs, the others wait for it (two
    # npm installs into one directory fail with ENOTEMPTY).
    mkdir -p "$(dirname "$dir")"
    exec 9>"$dir.lock"
    flock 9
fi
if [[ ! -f "$stamp" ]]; then
    command -v npm >/dev/null || { echo "install-memlab.sh: npm is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
    mkdir -p "$dir"
    echo "install-memlab.sh: installing @memlab/core@$VERSION into $dir" >&2
    (cd "$dir" && [[ -f package.json ]] || echo '{"private":true}' > "$dir/package.json")
    PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$dir" --no-audit --no-fund --ignore-scripts --loglevel=error \
        "@memlab/core@$VERSION" "@memlab/heap-analysis@$VERSION" >&2
    touch "$stamp"
fi
echo "$dir"
