(* dynlink_plugin: a host that loads the plugin plugin_data.cmxs (built from
   samples/plugin_data.ml, next to this executable) with Dynlink.loadfile at
   step 1. The plugin's data (its module block, its constants, and the heap
   data only its module field holds) exists only through the loaded plugin:
   its roots are the runtime's dynlinked globals (caml_dyn_globals), and its
   static data is in the plugin's mapped data segment. Steps 2 and 3 change
   nothing: the plugin stays loaded. *)

let plugin = Filename.concat (Filename.dirname Sys.executable_name) "plugin_data.cmxs"

(* Plugins loaded so far (1 after step 1). *)
let loaded = ref 0

let () =
  Heapsnap_sample.run (fun _cfg step ->
      if step = 1 then begin
        (try Dynlink.loadfile plugin
         with Dynlink.Error e ->
           prerr_endline ("dynlink_plugin: " ^ Dynlink.error_message e);
           exit 3);
        incr loaded
      end;
      (* The plugin registered its debug root when it was initialised. *)
      if not (List.mem_assoc "plugin_items" !Heapsnap_sample.debug_roots) then begin
        prerr_endline "dynlink_plugin: the plugin did not register its data";
        exit 4
      end)
