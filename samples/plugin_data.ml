(* plugin_data: the plugin that dynlink_plugin loads with Dynlink.loadfile
   (samples/build.sh builds it into plugin_data.cmxs, next to the host).

   Its static data lives in the plugin's own data segment, which OCaml 5.3
   registers nowhere (caml_data_segments lists the executable's units only):
   - the module block camlPlugin_data (fields: palette, items);
   - [palette]: a structured constant (3 cons cells, 3 records, 3 triples of
     ints, 3 strings), emitted by ocamlopt, never allocated;
   - the closure and the name passed to debug_root (the closure captures
     nothing: a constant closure; the name is a constant string).
   Its heap data is held only by its module field [items]: a ref, a list of
   2000 records, each record pointing at a static palette entry (a heap to
   static pointer) and at its own 100-byte payload. The host's heap points at
   the plugin's static closure and name (Heapsnap_sample.debug_roots). *)

type colour = { cname : string; rgb : int * int * int }

let palette =
  [ { cname = "red"; rgb = (255, 0, 0) };
    { cname = "green"; rgb = (0, 255, 0) };
    { cname = "blue"; rgb = (0, 0, 255) } ]

type item = { id : int; colour : colour; payload : Bytes.t }

let items : item list ref = ref []

let () =
  for i = 1999 downto 0 do
    items := { id = i; colour = List.nth palette (i mod 3); payload = Bytes.make 100 'p' } :: !items
  done;
  Heapsnap_sample.debug_root "plugin_items" (fun () -> Obj.repr !items)
