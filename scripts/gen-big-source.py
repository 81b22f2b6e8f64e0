#!/usr/bin/env python3
"""Writes a large OCaml source file for the compiler to chew on: N functions over variants,
records, lists and strings, and a main that prints the sum of their results (the same shape as
the source tests/dump/dump_ocamlopt.rs compiles, larger). Used to dump ocamlopt.opt mid-compilation.

    scripts/gen-big-source.py N OUT.ml
"""
import sys

n, path = int(sys.argv[1]), sys.argv[2]
out = ["type shape = Circle of int | Rect of int * int | Named of string * int list",
       "type r = { a : int; b : string; c : float list }"]
for i in range(n):
    out.append(f"let f{i} x = match x with\n  | Circle r -> r * {i} + List.length [{i}; {i}]\n"
               f"  | Rect (w, h) -> w + h + String.length \"{i}\"\n"
               f"  | Named (s, l) -> String.length s + List.fold_left ( + ) {i} l\n"
               f"let g{i} () = let v = {{ a = {i}; b = string_of_int {i}; c = [float_of_int {i}] }} in f{i} (Named (v.b, [v.a; {i}]))")
out.append("let () =\n  let total = ref 0 in")
out += [f"  total := !total + g{i} ();" for i in range(n)]
out.append("  print_int !total; print_newline ()")
open(path, "w").write("\n".join(out) + "\n")
