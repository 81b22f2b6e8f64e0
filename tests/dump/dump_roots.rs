//! The roots outside OCaml's own stacks and globals, on OCaml 4.14 and 5: finalisers, C global
//! and generational roots, and `CAMLparam`/`CAMLlocal` roots of a C frame that called back into
//! OCaml (so that the OCaml stack is walked across C). Each holds a block nothing else holds:
//! the oracle finds every live block reachable, and misses those blocks without that kind.

use crate::dump_support::*;
use heapsnap_format::{RootKind, Snapshot};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const PROGRAM: &str = r#"
external register_roots : string -> string -> unit = "heapsnap_register_roots"
external with_locals : (unit -> unit) -> string -> unit = "heapsnap_with_locals"

let finalised = ref 0

let () =
  (* Held only by the finaliser's closure (a root). The finalised array stays reachable, so
     that the finaliser does not run (and free the closure) before the dump. *)
  let by_closure = String.make 100 'f' in
  let kept = Array.make 50 1 in
  Gc.finalise (fun a -> finalised := Array.length a + String.length by_closure) kept;
  register_roots (String.make 90 'g') (String.make 70 'y');
  with_locals
    (fun () ->
      Gc.compact ();
      print_endline "READY";
      ignore (input_line stdin))
    (String.make 80 'l');
  print_endline (if Array.length kept = 50 then "DONE" else "?")
"#;

const STUBS: &str = r#"
#include <string.h>
#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/alloc.h>
#include <caml/callback.h>
#include <caml/fail.h>

static value global_root = Val_unit;
static value generational_root = Val_unit;

value heapsnap_register_roots(value g, value y)
{
  global_root = g;
  caml_register_global_root(&global_root);
  generational_root = y;
  caml_register_generational_global_root(&generational_root);
  return Val_unit;
}

value heapsnap_with_locals(value f, value s)
{
  CAMLparam2(f, s);
  CAMLlocal1(copy);
  copy = caml_copy_string("a string only this C frame holds, in its CAMLlocal");
  caml_callback(f, Val_unit);
  if (caml_string_length(s) != 80 || strlen(String_val(copy)) < 10) caml_failwith("roots changed");
  CAMLreturn(Val_unit);
}
"#;

fn roots_on(toolchain: &str) {
    if toolchain_samples(toolchain).is_none() {
        return; // counted as not covered
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_ocaml_by(&toolchain_prefix(toolchain), dir.path(), "roots", PROGRAM, &[], Some(STUBS));
    let mut child = KillOnDrop(Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).dies_with_test().spawn().unwrap());
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "READY");
    let out = dir.path().join("roots.snap");
    dump_ok(child.0.id() as i32, &out, &[]);
    let snap = Snapshot::open(&out).unwrap();
    reachability(&snap).assert_exact(toolchain);
    assert_eq!(verify(&out, true)["ok"], true, "{toolchain}");
    for kind in [RootKind::Finaliser, RootKind::GlobalRoot, RootKind::GenerationalRoot, RootKind::LocalRoot] {
        let without = reachability_from(&snap, |r| r.root_kind() != kind);
        assert!(!without.missed.is_empty(), "{toolchain}: no block is held only by {kind} roots");
    }
    // The OCaml frames below the C frame are walked too: the module's initialisation code
    // (`camlRoots__entry` in 4.14, `camlRoots.entry` in 5) holds `kept` across the call.
    let named = |r: &heapsnap_format::RootRecord| snap.string(r.name).unwrap_or("").to_string();
    let frames: Vec<String> = snap.roots().iter().filter(|r| r.root_kind() == RootKind::Stack).map(named).collect();
    assert!(frames.iter().any(|f| f.starts_with("camlRoots") && f.ends_with("entry")), "{toolchain}: stack frames {frames:?}");
    child.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert_eq!(rest.trim(), "DONE", "{toolchain}");
    assert!(child.0.wait().unwrap().success());
}

#[test]
fn finalisers_c_global_roots_and_local_roots_on_4_14() {
    roots_on("4.14.0");
}

#[test]
fn finalisers_c_global_roots_and_local_roots_on_5() {
    for toolchain in ["5.3.0", "5.2.0", "5.1.0"] {
        roots_on(toolchain);
    }
}
