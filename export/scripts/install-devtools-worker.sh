#!/usr/bin/env bash
# Builds Chrome DevTools' heap snapshot worker for node, once, into
# ${HEAPSNAP_CACHE:-~/.cache/heapsnap}/devtools-worker-VERSION, and prints the path of the
# bundle (`node BUNDLE FILE.heapsnapshot` loads the file as the Memory panel does and prints
# its time). The worker's TypeScript comes from the npm package chrome-devtools-frontend
# (pinned); esbuild (pinned) bundles it with devtools-worker/load.ts. DevTools' generated
# locale list is not in the package: one English locale stands in (only progress messages use
# it). The benchmark of heapsnap-export calls this.
set -euo pipefail
VERSION=1.0.1705227
ESBUILD=0.25.12
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/devtools-worker-$VERSION"
bundle="$dir/driver/load.mjs"
key="$(cat "$here"/devtools-worker/*.ts | sha256sum | cut -c1-16)"
if [[ ! -f "$dir/.built-$key" ]]; then
    # Concurrent callers build it once: the others wait for the lock, then find it built.
    mkdir -p "$(dirname "$dir")"
    exec 9>"$dir.lock"
    flock 9
fi
if [[ ! -f "$dir/.built-$key" ]]; then
    command -v npm >/dev/null || { echo "install-devtools-worker.sh: npm is needed (scripts/install-deps.sh installs it)" >&2; exit 1; }
    echo "install-devtools-worker.sh: building chrome-devtools-frontend@$VERSION's heap snapshot worker in $dir" >&2
    mkdir -p "$dir/driver"
    if [[ ! -d "$dir/package" ]]; then
        (cd "$dir" && npm pack --silent "chrome-devtools-frontend@$VERSION" >/dev/null && tar xzf "chrome-devtools-frontend-$VERSION.tgz" && rm "chrome-devtools-frontend-$VERSION.tgz")
    fi
    [[ -f "$dir/package.json" ]] || echo '{"private":true}' > "$dir/package.json"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "esbuild@$ESBUILD" >&2
    printf '%s\n' "export const LOCALES = ['en-US'];" "export const BUNDLED_LOCALES = ['en-US'];" \
        "export const DEFAULT_LOCALE = 'en-US';" "export const REMOTE_FETCH_PATTERN = '';" \
        "export const LOCAL_FETCH_PATTERN = '';" > "$dir/package/front_end/core/i18n/locales.js"
    cp "$here"/devtools-worker/*.ts "$dir/driver/"
    "$dir/node_modules/.bin/esbuild" "$dir/driver/load.ts" --bundle --platform=node --format=esm --target=node20 \
        --log-level=error --outfile="$bundle"
    touch "$dir/.built-$key"
fi
echo "$bundle"
