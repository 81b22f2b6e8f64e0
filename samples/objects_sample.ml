(* objects_sample: objects of a class kept in a global list.
   [accounts] holds 5000 objects of class [account]; each object has 3 instance
   variables (owner : string, balance : int, history : int list of 4 ints). *)

class account (owner_name : string) (initial : int) =
  object
    val owner = owner_name
    val mutable balance = initial
    val mutable history = [ initial ]
    method owner = owner
    method balance = balance
    method deposit n = balance <- balance + n; history <- n :: history
  end

let accounts : account list =
  List.init 5000 (fun i ->
      let a = new account (Printf.sprintf "owner-%04d" i) i in
      a#deposit 1; a#deposit 2; a#deposit 3;
      a)

let () =
  Heapsnap_sample.debug_root "accounts" (fun () -> Obj.repr accounts);
  Heapsnap_sample.run (fun _cfg _step ->
      ignore (Sys.opaque_identity (List.fold_left (fun acc a -> acc + a#balance) 0 accounts)))
