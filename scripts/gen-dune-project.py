#!/usr/bin/env python3
"""Writes a dune project of LIBS libraries of MODULES modules each, for dune to build while it
is dumped (issue 26: what dune keeps in memory mid-build, and how much of it heapsnap types).

    scripts/gen-dune-project.py LIBS MODULES OUT_DIR

Library i depends on libraries i-1 and i/2 (a chain with shortcuts, so dune's rules see a deep
dependency graph); module j of a library uses module j-1 of the same library and module j of
each dependency, so every module waits for others and dune's scheduler keeps many rules in
flight. Each module has records, variants, a functor application and enough functions that
the compiler takes a noticeable time over it. An executable links every library.
"""
import os
import sys

libs, modules, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]


def deps_of(i):
    return sorted({d for d in (i - 1, i // 2) if 0 <= d < i})


def module_source(i, j):
    uses = []
    if j > 0:
        uses.append(f"M{j - 1}.total")
    for d in deps_of(i):
        uses.append(f"L{d}.M{j}.total")
    used = " + ".join(f"({u} ())" for u in uses) or "0"
    lines = [
        f"type shape = Circle of int | Rect of int * int | Named of string * int list",
        f"type record = {{ id : int; name : string; tags : string list; weight : float }}",
        "module SMap = Map.Make (String)",
        "let table : (string, record) Hashtbl.t = Hashtbl.create 16",
    ]
    for k in range(40):
        lines.append(
            f"let f{k} x = match x with\n"
            f"  | Circle r -> r * {k} + List.length [{k}; {k + 1}]\n"
            f"  | Rect (w, h) -> w + h + String.length \"{i}_{j}_{k}\"\n"
            f"  | Named (s, l) -> String.length s + List.fold_left ( + ) {k} l\n"
            f"let g{k} () =\n"
            f"  let r = {{ id = {k}; name = \"r{i}_{j}_{k}\"; tags = [\"a\"; \"b{k}\"]; weight = {k}.5 }} in\n"
            f"  Hashtbl.replace table r.name r;\n"
            f"  let m = SMap.add r.name r.id SMap.empty in\n"
            f"  f{k} (Named (r.name, [r.id; SMap.cardinal m]))"
        )
    lines.append("let total () = " + " + ".join(f"g{k} ()" for k in range(40)) + f" + {used}")
    return "\n".join(lines) + "\n"


os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "dune-project"), "w") as f:
    f.write("(lang dune 3.0)\n")
for i in range(libs):
    d = os.path.join(out, f"l{i}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "dune"), "w") as f:
        deps = " ".join(f"l{x}" for x in deps_of(i))
        f.write(f"(library\n (name l{i})\n (libraries {deps}))\n")
    for j in range(modules):
        with open(os.path.join(d, f"m{j}.ml"), "w") as f:
            f.write(module_source(i, j))
    # The library's main module names its modules, so that others see them as L{i}.M{j}.
    with open(os.path.join(d, f"l{i}.ml"), "w") as f:
        f.write("".join(f"module M{j} = M{j}\n" for j in range(modules)))
main = os.path.join(out, "main")
os.makedirs(main, exist_ok=True)
with open(os.path.join(main, "dune"), "w") as f:
    f.write("(executable\n (name main)\n (libraries " + " ".join(f"l{i}" for i in range(libs)) + "))\n")
with open(os.path.join(main, "main.ml"), "w") as f:
    f.write("let () = print_int (" + " + ".join(f"L{i}.M{modules - 1}.total ()" for i in range(libs)) + ")\n")
