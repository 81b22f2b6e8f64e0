#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a circle.

For every crate of the workspace, each `.rs` file under `src/` is a module; a file depends on
another when it names it through a `crate::`, `super::` or `self::` path, or through a child
module it declares (`mod x;` then `x::...`). Re-exports (`pub use`, `pub(crate) use`) are left
out: a facade that re-exports its layers is not a dependency of theirs. Test modules
(`#[cfg(test)] mod tests { ... }` and files under `tests/`) are left out too. Prints every
circle found (the files in it), and exits with status 1 when there is one.

    scripts/check-import-cycles.py            # every crate of the workspace
    scripts/check-import-cycles.py dump/src   # one crate's sources
"""
import json
import os
import re
import subprocess
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
CHILD = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
REEXPORT = re.compile(r"^\s*pub(\([a-z]+\))?\s+use\b")


def module_of(src, path):
    """The module path (list of names) of a file under src/."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("lib", "main", "mod"):
        rel = rel[:-1]
    return rel


def strip_tests(text):
    """The text without `#[cfg(test)]` modules written inline."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def statements(text):
    """Source lines without comments, a `use` statement spanning lines joined into one."""
    text = re.sub(r"//[^\n]*", "", text)
    lines, buf = [], ""
    for line in text.split("\n"):
        if buf:
            buf += " " + line.strip()
            if ";" in line:
                lines.append(buf)
                buf = ""
        elif re.match(r"^\s*(pub(\([a-z]+\))?\s+)?use\b", line) and ";" not in line:
            buf = line
        else:
            lines.append(line)
    return lines


def crate_cycles(src):
    files = {}
    for root, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(root, n)
                files[tuple(module_of(src, p))] = p
    graph = {m: set() for m in files}
    for mod, path in files.items():
        text = strip_tests(open(path, encoding="utf-8").read())
        here = list(mod)
        # A file named mod.rs, lib.rs or main.rs is its module; another file is a module whose
        # parent is its folder's module.
        children = set(CHILD.findall(text))
        for line in statements(text):
            if REEXPORT.match(line):
                continue
            found = [(m.group(1), m.group(2)) for m in PATH.finditer(line)]
            for child in children:
                for m in re.finditer(r"(?<![\w:])" + child + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", line):
                    found.append(("self", "::" + child + m.group(1)))
            for start, rest in found:
                base = {"crate": [], "self": here, "super": here[:-1]}[start]
                names = [n for n in rest.split("::") if n]
                while names and names[0] == "super":
                    base, names = base[:-1], names[1:]
                target = base + names
                # The longest prefix that is a module file.
                while target and tuple(target) not in files:
                    target = target[:-1]
                target = tuple(target)
                if target in files and target != mod and not (len(target) < len(mod) and mod[: len(target)] == target and start == "self"):
                    graph[mod].add(target)
    return files, graph


def sccs(graph):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) > 1:
        sources = sys.argv[1:]
    else:
        meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], check=True, capture_output=True, text=True).stdout)
        sources = sorted({os.path.relpath(os.path.join(os.path.dirname(p["manifest_path"]), "src")) for p in meta["packages"]})
    failed = False
    for src in sources:
        files, graph = crate_cycles(src)
        circles = sccs(graph)
        edges = sum(len(v) for v in graph.values())
        print(f"import-cycles: {src}: {len(files)} files, {edges} imports between them, {len(circles)} circles")
        for comp in circles:
            failed = True
            print("  circle: " + ", ".join(sorted(files[m] for m in comp)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
