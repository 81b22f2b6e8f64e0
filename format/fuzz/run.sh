#!/usr/bin/env bash
# Fuzzes the snapshot reader with cargo-fuzz (libFuzzer) for a bounded time, on stable Rust.
#
#   format/fuzz/run.sh [SECONDS]       (default 60)
#
# Installs cargo-fuzz once into ~/.cache/heapsnap/cargo-fuzz (or $HEAPSNAP_CACHE/cargo-fuzz),
# safely when several runs race. The seed corpus is written by the format crate's tests from
# valid snapshots; the corpus grows in target/fuzz-corpus/read across runs. A crash, a hang
# (> 10 s on one input) or one allocation above 64 MB fails the run; libFuzzer saves the input
# under format/fuzz/artifacts/read/ and prints how to replay it.
set -euo pipefail

seconds=${1:-60}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}
root=$cache/cargo-fuzz

if [[ ! -x $root/bin/cargo-fuzz ]]; then
    mkdir -p "$cache"
    exec 9>"$cache/cargo-fuzz.lock"
    flock 9
    if [[ ! -x $root/bin/cargo-fuzz ]]; then
        echo "run.sh: installing cargo-fuzz into $root (about 2 minutes, once)" >&2
        # Built in a private directory and installed by cargo atomically: a failed build
        # leaves no cargo-fuzz binary behind.
        CARGO_TARGET_DIR="$cache/cargo-fuzz-build" cargo install cargo-fuzz --locked --root "$root"
        rm -rf "$cache/cargo-fuzz-build"
    fi
    flock -u 9
fi
export PATH="$root/bin:$PATH"

corpus=$repo/target/fuzz-corpus/read
mkdir -p "$corpus"
echo "run.sh: writing the seed corpus" >&2
(cd "$repo" && HEAPSNAP_FUZZ_CORPUS="$corpus" cargo test -q -p heapsnap-format --test snapshot_file fuzz_mutations::seed_corpus >/dev/null)

# cargo-fuzz passes unstable flags even with --sanitizer none; RUSTC_BOOTSTRAP lets the stable
# compiler accept them. A separate target directory: these builds use different flags.
echo "run.sh: fuzzing for ${seconds}s" >&2
cd "$here"
RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$repo/target/fuzz" \
    cargo fuzz run --sanitizer none --fuzz-dir "$here" read "$corpus" -- \
    -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1
