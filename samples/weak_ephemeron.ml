(* weak_ephemeron: weak arrays and an ephemeron table.
   [weak_arr] (1000 slots): slots 0..499 point to blobs that are also held
   strongly by [strong_blobs]; slots 500..999 point to fresh 512-byte blobs held
   ONLY by the weak array.
   [eph_table] (Ephemeron.K1 table, 500 bindings): 200 bindings use keys held
   strongly by [strong_keys] (their 1000-byte data is alive through the
   ephemeron because the key is alive); 300 bindings use fresh keys held ONLY by
   the table, with 800-byte data (both dead as far as retention goes).

   The weak-only objects must still exist at the snapshot, so each step keeps
   them in the slots of [pending] through Gc.compact and clears the slots just
   before printing READY: afterwards they are reachable only through weak
   pointers and survive until the next major cycle completes (none runs while
   paused). [pending] is one array allocated once and kept, not a list dropped
   after the compaction: dropping a holder would leave the holder itself as
   garbage no collection could remove without also clearing the weak pointers
   (a cycle that finds the holder dead finds the data dead too). Each step
   rebuilds the weak-only data, so every checkpoint sees the same shape. *)

module Key = struct
  type t = string
  let equal = String.equal
  let hash = Hashtbl.hash
end

module Eph_table = Ephemeron.K1.Make (Key)

let weak_slots = 1000
let weak_arr : Bytes.t Weak.t = Weak.create weak_slots
let strong_blobs : Bytes.t array = Array.init 500 (fun _ -> Bytes.make 256 's')
let eph_table : Bytes.t Eph_table.t = Eph_table.create 1024
let strong_keys : string array = Array.init 200 (fun i -> Printf.sprintf "strong-key-%04d" i)
(* One slot per weak-only object: 500 blobs, 300 keys. *)
let pending : Obj.t array = Array.make ((weak_slots - 500) + 300) (Obj.repr 0)

let rebuild () =
  let held = ref 0 in
  let hold x = pending.(!held) <- x; incr held in
  (* weak array *)
  Array.iteri (fun i b -> Weak.set weak_arr i (Some b)) strong_blobs;
  for i = 500 to weak_slots - 1 do
    let b = Bytes.make 512 'w' in
    hold (Obj.repr b);
    Weak.set weak_arr i (Some b)
  done;
  (* ephemeron table *)
  Eph_table.reset eph_table;
  Array.iter (fun k -> Eph_table.replace eph_table k (Bytes.make 1000 'S')) strong_keys;
  for i = 0 to 299 do
    let k = Printf.sprintf "weak-key-%04d" i in
    hold (Obj.repr k);
    Eph_table.replace eph_table k (Bytes.make 800 'W')
  done

let () =
  Heapsnap_sample.debug_root "weak_arr" (fun () -> Obj.repr weak_arr);
  Heapsnap_sample.debug_root "strong_blobs" (fun () -> Obj.repr strong_blobs);
  Heapsnap_sample.debug_root "eph_table" (fun () -> Obj.repr eph_table);
  Heapsnap_sample.debug_root "strong_keys" (fun () -> Obj.repr strong_keys);
  Heapsnap_sample.run
    (fun _cfg _step -> rebuild ())
    ~before_ready:(fun step ->
        Array.fill pending 0 (Array.length pending) (Obj.repr 0);
        (* sanity: the weak-only data is still there at the checkpoint *)
        let alive = ref 0 in
        for i = 0 to weak_slots - 1 do if Weak.check weak_arr i then incr alive done;
        if !alive <> weak_slots then
          Printf.eprintf "weak_ephemeron: step %d: only %d/%d weak slots alive\n%!"
            step !alive weak_slots;
        if Eph_table.length eph_table <> 500 then
          Printf.eprintf "weak_ephemeron: step %d: table has %d bindings\n%!"
            step (Eph_table.length eph_table))
