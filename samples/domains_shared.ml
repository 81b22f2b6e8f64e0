(* domains_shared: 3 domains besides the main one.
   Step 1 spawns the domains. Domain d (1..3) builds a domain-local array of
   d*1000 Bytes buffers of 64 bytes (kept live only in its own stack frame)
   and pushes 1000 shared results onto the global lock-free list [results]
   (an Atomic.t holding a list). It then reports ready and blocks on a
   Condition until the main domain releases it after the last step.
   Each domain also stores its total in the shared array [totals]. *)

type result = { domain : int; index : int; label : string }

let results : result list Atomic.t = Atomic.make []
let totals : int array = Array.make 4 0

let n_domains = 3
let per_domain = 1000

let m = Mutex.create ()
let c = Condition.create ()
let ready_count = ref 0
let released = ref false

let rec push r =
  let old = Atomic.get results in
  if not (Atomic.compare_and_set results old (r :: old)) then push r

let work d =
  let local = Array.init (d * 1000) (fun _ -> Bytes.make 64 (Char.chr (48 + d))) in
  for i = 0 to per_domain - 1 do
    push { domain = d; index = i; label = Printf.sprintf "d%d-r%04d" d i }
  done;
  totals.(d) <- Array.length local;
  Mutex.lock m;
  incr ready_count;
  Condition.broadcast c;
  while not !released do Condition.wait c m done;
  Mutex.unlock m;
  (* use the local data after being released, so it stays live while blocked *)
  Array.fold_left (fun acc b -> acc + Bytes.length b) 0 local

let () =
  let domains = ref [] in
  Heapsnap_sample.debug_root "results" (fun () -> Obj.repr results);
  Heapsnap_sample.debug_root "totals" (fun () -> Obj.repr totals);
  Heapsnap_sample.run
    (fun _cfg step ->
       if step = 1 then begin
         domains := List.init n_domains (fun i -> Domain.spawn (fun () -> work (i + 1)));
         Mutex.lock m;
         while !ready_count < n_domains do Condition.wait c m done;
         Mutex.unlock m
       end)
    ~finish:(fun () ->
        Mutex.lock m;
        released := true;
        Condition.broadcast c;
        Mutex.unlock m;
        List.iteri (fun i d -> assert (Domain.join d = (i + 1) * 1000 * 64)) !domains)
