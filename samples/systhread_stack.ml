(* systhread_stack: data kept alive only by a blocked systhread's stack.
   Step 1 starts a worker thread that builds a local table (an array of 4096
   records, each with a 200-byte string), tells the main thread it is ready,
   then blocks in Unix.read on a pipe. The table is used after the read returns,
   so while the thread is blocked it is live only in the worker's stack frame.
   After the last step the main thread writes one byte to the pipe and joins. *)

type row = { key : int; text : string; mutable seen : bool }

let ready = ref false
let ready_mutex = Mutex.create ()
let ready_cond = Condition.create ()

let worker (rd : Unix.file_descr) =
  let table = Array.init 4096 (fun i -> { key = i; text = String.make 200 'w'; seen = false }) in
  Mutex.lock ready_mutex;
  ready := true;
  Condition.signal ready_cond;
  Mutex.unlock ready_mutex;
  let buf = Bytes.create 1 in
  let n = Unix.read rd buf 0 1 in          (* blocks here, [table] live *)
  Array.iter (fun r -> r.seen <- true) table;
  ignore (Sys.opaque_identity (n + Array.length table))

let () =
  let rd, wr = Unix.pipe () in
  let thread = ref None in
  Heapsnap_sample.run
    (fun _cfg step ->
       if step = 1 then begin
         thread := Some (Thread.create worker rd);
         Mutex.lock ready_mutex;
         while not !ready do Condition.wait ready_cond ready_mutex done;
         Mutex.unlock ready_mutex
       end)
    ~finish:(fun () ->
        ignore (Unix.write_substring wr "x" 0 1);
        Option.iter Thread.join !thread)
