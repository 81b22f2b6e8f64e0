#!/usr/bin/env python3
# Regenerates samples/manifest.json (all numbers are computed here from the sample sources):
#   python3 samples/gen-manifest.py > samples/manifest.json
# Cross-check against the running samples with HEAPSNAP_SAMPLE_DEBUG=1 (Obj.reachable_words).
import json
W = 8
def blk(wosize): return W * (wosize + 1)
def strw(n): return n // 8 + 1          # wosize of a string/bytes of n bytes
def rng(x, lo=0, hi=0):
    tol = max(64, x // 100)   # default tolerance: 1% (at least 64 B) on each side
    return {"expected": x, "min": max(0, x - tol - lo), "max": x + tol + hi}
def per_steps(f, steps=3): return [dict(step=k, **f(k)) for k in range(1, steps + 1)]
def const_steps(r, steps=3): return [dict(step=k, **r) for k in range(1, steps + 1)]
def hashtbl_len(n, init=16):
    L = init
    while n > 2 * L: L *= 2
    return L
def obj(desc, tag, wosize, counts):
    return {"desc": desc, "tag": tag, "wosize": wosize, "bytes_each": blk(wosize), "count_by_step": counts}

samples = []

# ---------------- cache_leak
E = 5000
entry = blk(3) + blk(strw(10)) + blk(3) + blk(strw(1000))
def cache_at(k):
    n = E * k; L = hashtbl_len(n)
    return n * entry + blk(L) + blk(4)
samples.append({
  "name": "cache_leak", "source": "samples/cache_leak.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "unbounded Hashtbl cache (leak that grows every step)",
  "roots": [{
    "kind": "global", "module": "Cache_leak", "symbol": "camlCache_leak", "field": 1, "ident": "cache",
    "type": "(string, entry) Hashtbl.t",
    "retained_bytes": per_steps(lambda k: rng(cache_at(k), 0, 0)),
    "growth_per_step_bytes": {"min": E * entry, "max": E * entry + blk(hashtbl_len(2 * E)) },
    "objects": [
      obj("Hashtbl record {size; data; seed; initial_size}", 0, 4, [1, 1, 1]),
      obj("bucket array (Empty = immediate 0)", 0, hashtbl_len(E), [1, 0, 0]),
      obj("bucket array after resizes", 0, hashtbl_len(2 * E), [0, 1, 1]),
      obj("bucket cell Cons {key; data; next}", 0, 3, [E, 2 * E, 3 * E]),
      obj("key string \"req-NNNNNN\" (10 chars)", 252, strw(10), [E, 2 * E, 3 * E]),
      obj("entry record {id; payload; hits}", 0, 3, [E, 2 * E, 3 * E]),
      obj("payload Bytes (1000 bytes)", 252, strw(1000), [E, 2 * E, 3 * E]),
    ],
    "leak_suspect": True,
  }],
  "note": ("per entry: Cons 32 + key 24 (10 chars -> wosize 2) + record 32 + payload 1016 (1000 bytes -> wosize 126) = %d B; "
           "%d entries/step -> %d B/step. Bucket array length L is the smallest 16*2^k with n <= 2L: "
           "n=5000 -> L=4096 (32776 B), n=10000,15000 -> L=8192 (65544 B). Hashtbl record 40 B. "
           "step k: %s B. Checked with Obj.reachable_words (HEAPSNAP_SAMPLE_DEBUG=1). "
           "Keys/values are created by Cache_leak.lookup (cache_leak.ml:18-26).") %
          (entry, E, E * entry, ", ".join(str(cache_at(k)) for k in (1, 2, 3))),
})

# ---------------- closure_list
H = 10000
clos = blk(6); per_h = blk(2) + clos + blk(strw(256)) + blk(strw(13))
def cl_at(k): return blk(1) + H * k * per_h
samples.append({
  "name": "closure_list", "source": "samples/closure_list.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "closures registered in a global list and never removed",
  "roots": [{
    "kind": "global", "module": "Closure_list", "symbol": "camlClosure_list", "field": 0, "ident": "handlers",
    "type": "(int -> int) list ref",
    "retained_bytes": per_steps(lambda k: rng(cl_at(k))),
    "growth_per_step_bytes": {"min": H * per_h, "max": H * per_h},
    "objects": [
      obj("the ref cell", 0, 1, [1, 1, 1]),
      obj("list cons", 0, 2, [H, 2 * H, 3 * H]),
      obj("handler closure (code ptr, closinfo arity 1/startenv 2, 4 env fields: id, scratch, weight, label)", 247, 6, [H, 2 * H, 3 * H]),
      obj("captured scratch Bytes (256 bytes)", 252, strw(256), [H, 2 * H, 3 * H]),
      obj("captured label string \"handler-NNNNN\" (13 chars)", 252, strw(13), [H, 2 * H, 3 * H]),
    ],
    "leak_suspect": True,
  }],
  "closures": [{
    "root_ident": "handlers", "tag": 247, "wosize": 6, "env_fields": 4, "arity": 1,
    "count_by_step": [H, 2 * H, 3 * H],
    "code_symbol_regex": "^camlClosure_list\\.fun_[0-9]+$",
    "code_location": "samples/closure_list.ml:9",
    "creator_symbol_regex": "^camlClosure_list\\.make_handler_[0-9]+$",
    "creator_location": "samples/closure_list.ml:8",
  }],
  "note": ("per handler: cons 24 + closure 56 (wosize 6 = code pointer + closinfo + 4 captured values) + scratch 272 (256 bytes -> wosize 33) "
           "+ label 24 (13 chars -> wosize 2) = %d B; %d handlers/step -> %d B/step; plus the ref cell 16 B. step k: %s B. "
           "The inner 'let handle_event ev = ... in handle_event' is simplified to an anonymous function: the closure's code pointer is "
           "camlClosure_list.fun_NNN (-dcmm: function{closure_list.ml:9,19-102}; addr2line on it gives samples/closure_list.ml:9), "
           "allocated by camlClosure_list.make_handler_NNN (function{closure_list.ml:8,...}). Numeric suffixes change when the source changes.") %
          (per_h, H, H * per_h, ", ".join(str(cl_at(k)) for k in (1, 2, 3))),
})

# ---------------- effect_cont
deep_ws = blk(10000) + 10000 * blk(strw(100))
shal_ws = blk(2000) + 2000 * blk(16)
cont_overhead = blk(1) + blk(2)  # Some + Cont_tag block
samples.append({
  "name": "effect_cont", "source": "samples/effect_cont.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "data alive only in the stack of a suspended effect continuation (Deep and Shallow)",
  "roots": [
    {"kind": "global", "module": "Effect_cont", "symbol": "camlEffect_cont", "field": 1, "ident": "parked_deep",
     "type": "(int, int) Effect.Deep.continuation option ref",
     "via": "ref cell -> Some -> Cont_tag (245) block (wosize 2: stack pointer, last fiber) -> fiber stack (malloc'ed) -> frame of Effect_cont.deep_job (effect_cont.ml:19) -> working_set",
     "retained_bytes": const_steps(rng(blk(1) + cont_overhead + deep_ws, 0, 4096)),
     "objects": [obj("working_set array", 0, 10000, [1, 1, 1]),
                 obj("strings of 100 bytes", 252, strw(100), [10000, 10000, 10000]),
                 obj("continuation", 245, 2, [1, 1, 1])]},
    {"kind": "global", "module": "Effect_cont", "symbol": "camlEffect_cont", "field": 2, "ident": "parked_shallow",
     "type": "(int, int) Effect.Shallow.continuation option ref",
     "via": "ref cell -> Some -> Cont_tag (245) block -> fiber stack -> frame of Effect_cont.shallow_job (effect_cont.ml:24) -> samples",
     "retained_bytes": const_steps(rng(blk(1) + cont_overhead + shal_ws, 0, 4096)),
     "objects": [obj("samples array", 0, 2000, [1, 1, 1]),
                 obj("float arrays of 16", 254, 16, [2000, 2000, 2000]),
                 obj("continuation", 245, 2, [1, 1, 1])]},
  ],
  "stack_frames": [
    {"function_symbol_regex": "^camlEffect_cont\\.deep_job_[0-9]+$", "location": "samples/effect_cont.ml:19", "holds_bytes": deep_ws},
    {"function_symbol_regex": "^camlEffect_cont\\.shallow_job_[0-9]+$", "location": "samples/effect_cont.ml:24", "holds_bytes": shal_ws},
  ],
  "note": ("Both jobs start at step 1 and stay suspended until after the last step. deep working_set: array 10000 -> 80008 + 10000 strings of 100 bytes "
           "(wosize 13, 112 B) = %d B. shallow samples: array 2000 -> 16008 + 2000 float arrays of 16 (Double_array_tag, 136 B) = %d B. "
           "Per root add ref 16 + Some 16 + Cont 24 = 56 B; max allows 4 KiB for the handler closures / extension-constructor blocks also reachable from the fiber. "
           "The data is referenced by no global and no live stack of the main fiber: an analyzer that does not scan continuation stacks sees it as unreachable. "
           "Obj.reachable_words is not usable on continuations, so these figures are computed only.") % (deep_ws, shal_ws),
})

# ---------------- systhread_stack
sts = blk(4096) + 4096 * (blk(3) + blk(strw(200)))
samples.append({
  "name": "systhread_stack", "source": "samples/systhread_stack.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "data alive only in the stack of a systhread blocked in Unix.read",
  "roots": [
    {"kind": "thread_stack", "thread": "the second systhread of domain 0 (started at step 1, blocked in read(2) on a pipe)",
     "frame_symbol_regex": "^camlSysthread_stack\\.worker_[0-9]+$", "location": "samples/systhread_stack.ml:21",
     "retained_bytes": const_steps(rng(sts, 0, 1024)),
     "objects": [obj("table array", 0, 4096, [1, 1, 1]),
                 obj("row record {key; text; seen}", 0, 3, [4096] * 3),
                 obj("text string (200 bytes)", 252, strw(200), [4096] * 3)]},
  ],
  "note": "table: array 4096 -> 32776 + 4096 x (record 32 + string 216 (200 bytes -> wosize 26)) = %d B. Globals ready/ready_mutex/ready_cond (fields 0-2) do not reach it." % sts,
})

# ---------------- domains_shared
res = blk(1) + 3000 * (blk(2) + blk(3) + blk(strw(8)))
loc = lambda d: blk(d * 1000) + d * 1000 * blk(strw(64))
samples.append({
  "name": "domains_shared", "source": "samples/domains_shared.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "3 domains besides main share an Atomic list; each keeps domain-local data on its stack",
  "roots": [
    {"kind": "global", "module": "Domains_shared", "symbol": "camlDomains_shared", "field": 0, "ident": "results",
     "type": "result list Atomic.t", "retained_bytes": const_steps(rng(res)),
     "objects": [obj("Atomic.t cell", 0, 1, [1] * 3), obj("list cons", 0, 2, [3000] * 3),
                 obj("result record {domain; index; label}", 0, 3, [3000] * 3),
                 obj("label \"dD-rNNNN\" (8 chars)", 252, strw(8), [3000] * 3)]},
    {"kind": "global", "module": "Domains_shared", "symbol": "camlDomains_shared", "field": 1, "ident": "totals",
     "type": "int array", "retained_bytes": const_steps(rng(blk(4))), "objects": [obj("int array", 0, 4, [1] * 3)]},
  ] + [
    {"kind": "domain_stack", "domain": d, "frame_symbol_regex": "^camlDomains_shared\\.work_[0-9]+$",
     "location": "samples/domains_shared.ml:35",
     "retained_bytes": const_steps(rng(loc(d), 0, 1024)),
     "objects": [obj("local array", 0, d * 1000, [1] * 3), obj("Bytes of 64", 252, strw(64), [d * 1000] * 3)]}
    for d in (1, 2, 3)],
  "note": ("results: Atomic cell 16 + 3000 x (cons 24 + record 32 + label 24) = %d B (1000 pushed by each domain). "
           "Domain d's local array: d*1000 words (8000d+8 B) + d*1000 Bytes of 64 (wosize 9, 80 B): d=1: %d, d=2: %d, d=3: %d B. "
           "The spawned domains are blocked in Condition.wait (samples/domains_shared.ml:35) at every checkpoint; they are spawned in order 1,2,3 "
           "(Domain ids are assigned by the runtime, normally 1,2,3).") % (res, loc(1), loc(2), loc(3)),
})

# ---------------- weak_ephemeron
strong_blobs = blk(500) + 500 * blk(strw(256))
eph_struct = blk(4) + blk(1024) + 500 * blk(3) + 500 * blk(3)
eph_live_data = 200 * blk(strw(1000))
strong_keys = blk(200) + 200 * blk(strw(15))
weak_only_blobs = 500 * blk(strw(512))
weak_only_eph = 300 * (blk(strw(13)) + blk(strw(800)))
samples.append({
  "name": "weak_ephemeron", "source": "samples/weak_ephemeron.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "Weak array and Ephemeron.K1 table; part of the data is reachable only weakly",
  "roots": [
    {"kind": "global", "module": "Weak_ephemeron", "symbol": "camlWeak_ephemeron", "field": 3, "ident": "weak_arr",
     "type": "Bytes.t Weak.t", "retained_bytes": const_steps(rng(blk(1002))),
     "objects": [obj("weak array = ephemeron with 1000 keys (fields: link, data, keys...)", 251, 1002, [1] * 3)]},
    {"kind": "global", "module": "Weak_ephemeron", "symbol": "camlWeak_ephemeron", "field": 4, "ident": "strong_blobs",
     "type": "Bytes.t array", "retained_bytes": const_steps(rng(strong_blobs)),
     "objects": [obj("array", 0, 500, [1] * 3), obj("blob Bytes of 256 (also in weak_arr slots 0..499)", 252, strw(256), [500] * 3)]},
    {"kind": "global", "module": "Weak_ephemeron", "symbol": "camlWeak_ephemeron", "field": 5, "ident": "eph_table",
     "type": "Bytes.t Ephemeron.K1.Make(Key).t",
     "retained_bytes": const_steps(rng(eph_struct, 0, eph_live_data)),
     "objects": [obj("table record", 0, 4, [1] * 3), obj("bucket array", 0, 1024, [1] * 3),
                 obj("bucket Cons (hash, container, next)", 0, 3, [500] * 3),
                 obj("K1 ephemeron container (link, data, key)", 251, 3, [500] * 3),
                 obj("data of the 200 live keys: Bytes of 1000 (alive through the ephemeron)", 252, strw(1000), [200] * 3)]},
    {"kind": "global", "module": "Weak_ephemeron", "symbol": "camlWeak_ephemeron", "field": 6, "ident": "strong_keys",
     "type": "string array", "retained_bytes": const_steps(rng(strong_keys)),
     "objects": [obj("array", 0, 200, [1] * 3), obj("key \"strong-key-NNNN\" (15 chars)", 252, strw(15), [200] * 3)]},
  ],
  "weak_only": [
    {"desc": "Bytes of 512 in weak_arr slots 500..999", "held_by": "weak_arr", "tag": 252, "wosize": strw(512), "count": 500, "bytes": weak_only_blobs},
    {"desc": "weak-only ephemeron keys \"weak-key-NNNN\" (13 chars)", "held_by": "eph_table", "tag": 252, "wosize": strw(13), "count": 300, "bytes": 300 * blk(strw(13))},
    {"desc": "data of the 300 weak-only keys: Bytes of 800", "held_by": "eph_table", "tag": 252, "wosize": strw(800), "count": 300, "bytes": 300 * blk(strw(800))},
  ],
  "weak_only_bytes": weak_only_blobs + weak_only_eph,
  "note": ("weak_arr: Weak.create 1000 = Abstract_tag (251) block of 2+1000 fields = 8024 B; its keys are weak. strong_blobs: 4008 + 500 x 272 = %d. "
           "eph_table: record 40 + bucket array 1024 (8200) + 500 Cons x 32 + 500 containers x 32 = %d B, plus %d B of data whose key is alive "
           "(min = ephemeron data not counted, max = counted). strong_keys: 1608 + 200 x 24 = %d. Weak-only (must NOT count as retained): "
           "500 x 528 = %d B in the weak array, 300 x (24 + 816) = %d B in the table; total %d B. They are allocated each step, kept in the "
           "slots of the global array 'pending' (field 7, 800 slots, allocated once and never dropped: 6408 B) through Gc.compact, and the slots are "
           "cleared just before READY, so they exist in the snapshot but only weak pointers reach them, and no garbage is left. "
           "Ephemeron field 0 (link) points to other ephemerons: not a strong edge. Field layout (module-fields.sh): 0 Key, 1 Eph_table, 2 weak_slots, "
           "3 weak_arr, 4 strong_blobs, 5 eph_table, 6 strong_keys, 7 pending, 8 rebuild, 9 Key.equal, 10 Key.hash (a submodule's bindings get fields of the outer block).") %
          (strong_blobs, eph_struct, eph_live_data, strong_keys, weak_only_blobs, weak_only_eph, weak_only_blobs + weak_only_eph),
})

# ---------------- bigarray_sample
ba1 = blk(1 + 5); ba2 = blk(1 + 6)
samples.append({
  "name": "bigarray_sample", "source": "samples/bigarray_sample.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "Bigarrays: small custom blocks in the heap, payload malloc'ed outside it",
  "roots": [
    {"kind": "global", "module": "Bigarray_sample", "symbol": "camlBigarray_sample", "field": 0, "ident": "ba_f64",
     "retained_bytes": const_steps(rng(ba1)), "objects": [obj("custom block, ops \"_bigarr02\", 1 dim", 255, 6, [1] * 3)],
     "external_bytes": 8000000},
    {"kind": "global", "module": "Bigarray_sample", "symbol": "camlBigarray_sample", "field": 1, "ident": "ba_i32_2d",
     "retained_bytes": const_steps(rng(ba2)), "objects": [obj("custom block, ops \"_bigarr02\", 2 dims", 255, 7, [1] * 3)],
     "external_bytes": 2000000},
    {"kind": "global", "module": "Bigarray_sample", "symbol": "camlBigarray_sample", "field": 2, "ident": "ba_char",
     "retained_bytes": const_steps(rng(ba1)), "objects": [obj("custom block, ops \"_bigarr02\", 1 dim", 255, 6, [1] * 3)],
     "external_bytes": 100000},
    {"kind": "global", "module": "Bigarray_sample", "symbol": "camlBigarray_sample", "field": 3, "ident": "ba_sub",
     "retained_bytes": const_steps(rng(ba1)), "objects": [obj("custom block, ops \"_bigarr02\", 1 dim, with proxy", 255, 6, [1] * 3)],
     "external_bytes": 8000, "shares_data_with": "ba_f64"},
  ],
  "note": ("A bigarray is caml_alloc_custom_mem(&caml_ba_ops, 32 + 8*num_dims) -> wosize 1 (ops pointer) + 4 + num_dims: 56 B (1 dim), 64 B (2 dims). "
           "External (malloc) payload: float64 10^6 x 8 = 8000000; int32 1000x500 x 4 = 2000000; char 100000; ba_sub = first 1000 float64 of ba_f64 "
           "(8000 B, same memory, shared via a caml_ba_proxy). The heap itself holds only 232 B for all four."),
})

# ---------------- lazy_sample
unforced = blk(1) + blk(3) + blk(10000)
forced = blk(20000)
samples.append({
  "name": "lazy_sample", "source": "samples/lazy_sample.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "lazy values: an unforced suspension retaining its captured environment; a forced one",
  "roots": [
    {"kind": "global", "module": "Lazy_sample", "symbol": "camlLazy_sample", "field": 1, "ident": "unforced",
     "retained_bytes": const_steps(rng(unforced)),
     "objects": [obj("Lazy_tag block", 246, 1, [1] * 3), obj("suspension closure (code, closinfo, captured)", 247, 3, [1] * 3),
                 obj("captured int array", 0, 10000, [1] * 3)]},
    {"kind": "global", "module": "Lazy_sample", "symbol": "camlLazy_sample", "field": 2, "ident": "forced",
     "retained_bytes": const_steps(rng(forced, 0, blk(1))),
     "objects": [obj("forced result: float array (field points directly at it, observed)", 254, 20000, [1] * 3)]},
  ],
  "note": ("unforced: Lazy_tag (246) wosize 1 (16) -> closure wosize 3 (32) -> int array 10000 (80008) = %d B, observed tag 246. "
           "forced (forced at step 1): float array 20000 = %d B. Lazy.force turns the block into Forward_tag (250); observed with OCaml 5.3: "
           "Obj.tag of the global is 254, i.e. the GC short-circuited the Forward block and the module field points straight at the float array "
           "(the block was still young when forced). max allows a remaining Forward block (+16 B).") % (unforced, forced),
})

# ---------------- objects_sample
per_acct = blk(2) + blk(5) + blk(strw(10)) + 4 * blk(2)
samples.append({
  "name": "objects_sample", "source": "samples/objects_sample.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "objects of a class held in a global list",
  "roots": [
    {"kind": "global", "module": "Objects_sample", "symbol": "camlObjects_sample", "field": 1, "ident": "accounts",
     "retained_bytes": const_steps(rng(5000 * per_acct, 0, 512)),
     "objects": [obj("list cons", 0, 2, [5000] * 3),
                 obj("object (method table, object id, owner, balance, history)", 248, 5, [5000] * 3),
                 obj("owner string \"owner-NNNN\" (10 chars)", 252, strw(10), [5000] * 3),
                 obj("history cons (4 per object)", 0, 2, [20000] * 3)]},
  ],
  "note": ("per account: cons 24 + object 48 (Object_tag 248, wosize 2 + 3 instance variables) + owner 24 + history 4 x 24 = %d B; x 5000 = %d B. "
           "Field 0 of each object is the class's method table, shared by all objects and also reachable from the class global 'account' "
           "(field 0); Obj.reachable_words counts 208 B for it, so it is not retained by 'accounts' alone (max allows 512 B).") % (per_acct, 5000 * per_acct),
})

# ---------------- long_list
samples.append({
  "name": "long_list", "source": "samples/long_list.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "a list of 10^6 immediate ints held by a global",
  "roots": [{"kind": "global", "module": "Long_list", "symbol": "camlLong_list", "field": 0, "ident": "long_list",
             "retained_bytes": const_steps(rng(10**6 * blk(2))), "objects": [obj("list cons", 0, 2, [10**6] * 3)]}],
  "note": "10^6 cons cells x 24 B = 24000000 B exactly (elements are immediates). Deep chain: tools must not recurse per element.",
})

# ---------------- large_array
boxed = blk(100000) + 100000 * blk(2)
samples.append({
  "name": "large_array", "source": "samples/large_array.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "arrays far above the large-allocation threshold",
  "roots": [
    {"kind": "global", "module": "Large_array", "symbol": "camlLarge_array", "field": 0, "ident": "big_ints",
     "retained_bytes": const_steps(rng(blk(10**6))), "objects": [obj("int array", 0, 10**6, [1] * 3)]},
    {"kind": "global", "module": "Large_array", "symbol": "camlLarge_array", "field": 1, "ident": "big_floats",
     "retained_bytes": const_steps(rng(blk(500000))), "objects": [obj("float array", 254, 500000, [1] * 3)]},
    {"kind": "global", "module": "Large_array", "symbol": "camlLarge_array", "field": 2, "ident": "big_boxed",
     "retained_bytes": const_steps(rng(boxed)), "objects": [obj("array of pairs", 0, 100000, [1] * 3), obj("pair (i, i+1)", 0, 2, [100000] * 3)]},
  ],
  "note": ("Blocks above Max_young_wosize (256 words) are allocated directly in the major heap; above 128 words (SIZECLASS_MAX) they are "
           "'large' (individually malloc'ed) rather than in size-class pools. big_ints 10^6 x 8 + 8 = 8000008; big_floats 500000 x 8 + 8 = 4000008 "
           "(Double_array_tag 254); big_boxed 800008 + 100000 x 24 = %d.") % boxed,
})

# ---------------- large_heap (args 1)
items = 142857
strs_short = 100   # "item-0".."item-99" are <= 7 chars -> wosize 1
shared = items * (blk(5) + blk(strw(11)) + blk(3) + blk(1) + blk(4)) - strs_short * 8
items_spine = blk(1) + items * blk(2)
idx_L = hashtbl_len(items)
index_spine = blk(4) + blk(idx_L) + items * blk(3)
samples.append({
  "name": "large_heap", "source": "samples/large_heap.ml", "variants": ["std", "rhb16"],
  "args": ["1"], "steps": 3, "pattern": "benchmark heap generator: about N million live objects (N = first argument, float)",
  "scaling": "items = round(N * 10^6 / 7); objects = 7 * items + 3; bytes ~= 223.3 * items (about 31.9 MB per million objects)",
  "roots": [
    {"kind": "global", "module": "Large_heap", "symbol": "camlLarge_heap", "field": 0, "ident": "items",
     "retained_bytes": const_steps(rng(items_spine)), "reachable_bytes": items_spine + shared,
     "objects": [obj("ref cell", 0, 1, [1] * 3), obj("list cons", 0, 2, [items] * 3)]},
    {"kind": "global", "module": "Large_heap", "symbol": "camlLarge_heap", "field": 1, "ident": "index",
     "retained_bytes": const_steps(rng(index_spine)), "reachable_bytes": index_spine + shared,
     "objects": [obj("Hashtbl record", 0, 4, [1] * 3), obj("bucket array", 0, idx_L, [1] * 3), obj("bucket Cons (key int, data, next)", 0, 3, [items] * 3)]},
  ],
  "shared_between_roots": {"roots": ["items", "index"], "bytes": shared,
     "objects": [obj("item record {id; name; vec; score; weight}", 0, 5, [items] * 3),
                 obj("name string \"item-N\", N >= 100 (8..11 chars)", 252, 2, [items - strs_short] * 3),
                 obj("name string \"item-N\", N < 100 (6..7 chars)", 252, 1, [strs_short] * 3),
                 obj("vec int array of 3", 0, 3, [items] * 3), obj("weight boxed float", 253, 1, [items] * 3),
                 obj("score closure capturing i and name (camlLarge_heap.score_NNN, large_heap.ml:27)", 247, 4, [items] * 3)]},
  "total_live_bytes": items_spine + index_spine + shared,
  "total_objects": 7 * items + 3,
  "note": ("N=1: %d items x 7 blocks = %d objects, + bucket array, table record, ref. Shared by items and index (dominated by neither): record 48 + name 24 "
           "+ vec 32 + boxed float 16 + closure 40 = 160 B/item, minus 8 B for each of the 100 names shorter than 8 chars = %d B. items spine: ref 16 + "
           "%d cons x 24 = %d. index spine: record 40 + bucket array %d words (%d B) + %d Cons x 32 = %d. Total %d B. "
           "reachable_bytes (Obj.reachable_words) verified: items 26284904, index 28476368.") %
          (items, 7 * items, shared, items, items_spine, idx_L, blk(idx_L), items, index_spine, items_spine + index_spine + shared),
})

# ---------------- steady_state
ring = blk(1000) + 1000 * blk(strw(1000))
table = blk(4) + blk(1024) + 1000 * (blk(3) + blk(4))
samples.append({
  "name": "steady_state", "source": "samples/steady_state.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "heavy allocation, constant live set (no leak suspect)",
  "roots": [
    {"kind": "global", "module": "Steady_state", "symbol": "camlSteady_state", "field": 0, "ident": "ring",
     "retained_bytes": const_steps(rng(ring)), "growth_per_step_bytes": {"min": 0, "max": 0},
     "objects": [obj("array", 0, 1000, [1] * 3), obj("Bytes of 1000 (replaced each step)", 252, strw(1000), [1000] * 3)], "leak_suspect": False},
    {"kind": "global", "module": "Steady_state", "symbol": "camlSteady_state", "field": 1, "ident": "table",
     "retained_bytes": const_steps(rng(table)), "growth_per_step_bytes": {"min": 0, "max": 0},
     "objects": [obj("Hashtbl record", 0, 4, [1] * 3), obj("bucket array", 0, 1024, [1] * 3),
                 obj("bucket Cons", 0, 3, [1000] * 3), obj("int array of 4 (replaced each step)", 0, 4, [1000] * 3)], "leak_suspect": False},
  ],
  "allocated_per_step_bytes_approx": 40000000,
  "note": ("ring: 8008 + 1000 x 1016 = %d. table: record 40 + bucket array 1024 (8200; Hashtbl.create 1024 never resizes for 1000 keys) + 1000 x (Cons 32 + array 40) = %d. "
           "Hashtbl.replace on an existing key mutates the bucket in place. Each step allocates roughly 40 MB of garbage (churn of 200000 rounds + a "
           "100000-string temporary list); total live heap after Gc.compact is the same at every step.") % (ring, table),
})

# ---------------- dynlink_plugin (loads plugin_data.cmxs)
PI = 2000
plugin_items = blk(1) + PI * (blk(2) + blk(3) + blk(strw(100)))
palette = [("list cons", 0, 2), ("record {cname; rgb}", 0, 2), ("rgb triple", 0, 3), ("colour name string (3..5 chars)", 252, strw(5))]
plugin_static = blk(2) + sum(3 * blk(w) for (_, _, w) in palette) + blk(2) + blk(strw(12))
samples.append({
  "name": "dynlink_plugin", "source": "samples/dynlink_plugin.ml", "variants": ["std", "rhb16"],
  "args": [], "steps": 3, "pattern": "data of a natdynlinked plugin (Dynlink.loadfile of a .cmxs): its static data is in the plugin's own data segment",
  "plugin": {"file": "plugin_data.cmxs", "source": "samples/plugin_data.ml", "unit": "Plugin_data", "symbol": "camlPlugin_data", "loaded_at_step": 1},
  "roots": [
    {"kind": "dyn_global", "module": "Plugin_data", "symbol": "camlPlugin_data", "field": 1, "ident": "items",
     "type": "item list ref",
     "retained_bytes": const_steps(rng(plugin_items)),
     "objects": [obj("ref cell", 0, 1, [1] * 3), obj("list cons", 0, 2, [PI] * 3),
                 obj("item record {id; colour; payload}", 0, 3, [PI] * 3), obj("payload Bytes (100 bytes)", 252, strw(100), [PI] * 3)]},
    {"kind": "dyn_global", "module": "Plugin_data", "symbol": "camlPlugin_data", "field": 0, "ident": "palette",
     "type": "colour list (a structured constant: static data of the plugin)",
     "retained_bytes": const_steps(rng(0))},
  ],
  "static_objects": [obj("module block camlPlugin_data (palette, items)", 0, 2, [1] * 3)]
                    + [obj("palette " + d, t, w, [3] * 3) for (d, t, w) in palette]
                    + [obj("constant closure passed to Heapsnap_sample.debug_root", 247, 2, [1] * 3),
                       obj("constant string \"plugin_items\" passed to Heapsnap_sample.debug_root", 252, strw(12), [1] * 3)],
  "static_bytes": plugin_static,
  "heap_to_static_pointers": PI + 2,
  "note": ("The plugin's heap data: ref 16 + %d x (cons 24 + record 32 + payload 112 (100 bytes -> wosize 13)) = %d B, held only by field 1 of the "
           "plugin's module block (a dynlinked global: caml_dyn_globals). Static data of the plugin (never retained): module block 24 + palette "
           "(3 cons 24, 3 records 24, 3 triples 32, 3 strings 16) 288 + constant closure 24 + string \"plugin_items\" 24 = %d B (-dcmm), all in "
           "camlPlugin_data.data_begin..data_end. Heap pointers into it: each item's colour field (%d) and the host's debug_root tuple "
           "(Heapsnap_sample.debug_roots) -> the plugin's name string and closure (2). HEAPSNAP_SAMPLE_DEBUG=1 prints 336216 B for "
           "plugin_items: Obj.reachable_words of the list (not the ref: -16 B) counts the static records, triples and strings it reaches (+216 B).") %
          (PI, plugin_items, plugin_static, PI),
})

# ---------------- reserved_bits
groups = [(7, 100, 2, "Alloc_small_with_reserved (minor heap, then promoted)"), (42, 50, 4, "caml_alloc_shr_reserved (pool)"),
          (1000, 10, 300, "caml_alloc_shr_reserved (large allocation)"), (65535, 5, 3, "caml_alloc_shr_reserved (pool)")]
roots = []
for i, (r, n, ws, how) in enumerate(groups):
    roots.append({"kind": "global", "module": "Reserved_bits", "symbol": "camlReserved_bits", "field": i, "ident": "res%d" % r,
                  "retained_bytes": const_steps(rng(blk(n) + n * blk(ws))),
                  "objects": [obj("array (reserved 0)", 0, n, [1] * 3), obj("block with reserved=%d" % r, 0, ws, [n] * 3)]})
samples.append({
  "name": "reserved_bits", "source": "samples/reserved_bits.ml", "c_stubs": ["samples/reserved_bits_stubs.c"], "variants": ["rhb16"],
  "args": [], "steps": 3, "pattern": "blocks with values in the reserved header bits (runtime configured with --enable-reserved-header-bits=16)",
  "reserved_header_bits": 16,
  "reserved": [{"value": r, "count": n, "tag": 0, "wosize": ws, "allocated_with": how, "root_ident": "res%d" % r} for (r, n, ws, how) in groups],
  "roots": roots,
  "note": ("Header = reserved (bits 63..48) | wosize (47..10) | color (9..8) | tag. Fields hold Val_long(0..wosize-1). Arrays: 100 -> 808, 50 -> 408, "
           "10 -> 88, 5 -> 48 B. Retained: res7 808+100x24=3208, res42 408+50x40=2408, res1000 88+10x2408=24168, res65535 48+5x32=208. "
           "Every checkpoint re-checks the bits (exit 4 if lost; exit 3 on a runtime without 16 reserved bits). Reserved bits survive promotion "
           "(minor_gc.c passes Reserved_hd) and compaction (memcpy of the whole block)."),
})

manifest = {
  "schema_version": 1,
  "ocaml_version": "5.3.0",
  "word_bytes": 8,
  "protocol": "NAME [--steps K] [--pause] [ARGS...]; after building step i's data: Gc.compact, then stdout line 'READY i' (i = 1..K); with --pause, read one stdin line (EOF = stop pausing); after step K: 'DONE', exit 0. Debug: HEAPSNAP_SAMPLE_DEBUG=1 prints '# step i root NAME reachable_bytes B' on stderr.",
  "build": "samples/build.sh [TOOLCHAIN] prints the directory holding the executables (TOOLCHAIN/NAME under ${HEAPSNAP_SAMPLES_DIR:-target/samples}); variant std is every standard toolchain (5.1.0, 5.2.0, 5.3.0), rhb16 is 5.3.0-rhb16",
  "conventions": {
    "bytes": "heap bytes including the 8-byte header of every block: 8 * (wosize + 1). Strings/Bytes of n bytes have wosize n/8 + 1.",
    "retained_bytes": "bytes of the heap blocks dominated by the root (freed if that root's reference were cleared), weak and ephemeron references not counting as strong, static data (module blocks, constant closures) excluded; one {step, expected, min, max} per checkpoint with the sample's 'args' and 'steps'. 'expected' is exact arithmetic (cross-checked with Obj.reachable_words where possible); min/max = expected -/+ 1% (at least 64 B), widened where the note says so (policy-dependent parts); tests should check min <= measured <= max.",
    "field": "index of the binding in the module block (symbol caml<Module>, static data; header wosize = number of toplevel bindings incl. functions, constants and submodule members). Determined with samples/module-fields.sh (ocamlopt -dlambda: '(setfield_ptr(root-init) FIELD (global Module!) ident)'), confirmed against -dcmm and at run time by reading camlWeak_ephemeron[i] from C.",
    "objects": "blocks reached from the root: desc, tag, wosize, bytes_each, count_by_step (count at each checkpoint)",
    "symbols": "OCaml 5.3 native symbols are caml<Module>.<name>_<stamp>; stamps change with the source, so *_symbol_regex fields are regexes. Locations are file:line of samples/ sources (DWARF line info from -g points there).",
    "kinds": "global = field of a module block; dyn_global = field of the module block of a unit loaded with Dynlink (caml_dyn_globals); thread_stack = stack of a blocked systhread; domain_stack = stack of another domain's main fiber; continuations are reached from a global through a Cont_tag (245) block",
    "weak_only": "objects present in the snapshot but reachable only through weak/ephemeron pointers: they must not count as retained by anything"
  },
  "samples": samples,
}
def leaf(v):
    if isinstance(v, dict): return all(leaf(x) and not isinstance(x, (dict, list)) or (isinstance(x, list) and all(not isinstance(y, (dict, list)) for y in x)) for x in v.values())
    if isinstance(v, list): return all(not isinstance(x, (dict, list)) for x in v)
    return True
def pp(v, ind=0):
    sp = "  " * ind
    if leaf(v) or not isinstance(v, (dict, list)):
        return json.dumps(v, separators=(", ", ": "))
    if isinstance(v, dict):
        items = [sp + "  " + json.dumps(k) + ": " + pp(x, ind + 1) for k, x in v.items()]
        return "{\n" + ",\n".join(items) + "\n" + sp + "}"
    items = [sp + "  " + pp(x, ind + 1) for x in v]
    return "[\n" + ",\n".join(items) + "\n" + sp + "]"
print(pp(manifest))
