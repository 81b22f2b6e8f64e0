#!/usr/bin/env python3
"""Checks the minimum Rust version every heapsnap crate declares (`rust-version`).

heapsnap runs on Linux x86-64 only, so dependencies of other platforms do not count. The
declared version is true when it is at least the highest `rust-version` among the
packages the crate builds with (normal, build and dev dependencies, as resolved in
Cargo.lock); clippy's `incompatible_msrv` lint (run by the test command with `-D warnings`)
then checks that our own code calls no standard library API newer than it. A declared version
above every dependency's is allowed only when our code needs it, so this prints the bound
each crate could declare. Exit status 1 when a crate declares nothing or too low a version.
"""
import json
import subprocess
import sys


def version(text):
    parts = [int(p) for p in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def show(v):
    return ".".join(str(p) for p in v[:2]) if v[2] == 0 else ".".join(map(str, v))


def main():
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked",
         "--filter-platform", "x86_64-unknown-linux-gnu"],
        check=True, capture_output=True, text=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    deps = {n["id"]: [d["pkg"] for d in n["deps"]] for n in meta["resolve"]["nodes"]}
    members = meta["workspace_members"]
    failed = False
    for member in members:
        package = packages[member]
        seen, stack = set(), list(deps.get(member, []))
        needed, needed_by = (0, 0, 0), None
        while stack:
            pid = stack.pop()
            if pid in seen or pid in members:
                continue
            seen.add(pid)
            dep = packages[pid]
            if dep.get("rust_version") and version(dep["rust_version"]) > needed:
                needed, needed_by = version(dep["rust_version"]), f'{dep["name"]} {dep["version"]}'
            stack.extend(deps.get(pid, []))
        declared = package.get("rust_version")
        if not declared:
            print(f'msrv: {package["name"]} declares no rust-version (its dependencies need {show(needed)}, {needed_by})')
            failed = True
        elif version(declared) < needed:
            print(f'msrv: {package["name"]} declares rust-version {declared}, but {needed_by} needs {show(needed)}')
            failed = True
        else:
            print(f'msrv: {package["name"]} {declared} (dependencies need {show(needed)}, {needed_by})')
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
