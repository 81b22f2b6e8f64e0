#!/usr/bin/env bash
# Builds an OCaml 5.3.0 runtime altered on purpose, and a few samples linked against it, for the
# tests of probing (issue 32): heapsnap must read each one right or refuse it naming the fact
# that differs, never write a wrong snapshot silently. Prints the directory of the samples.
#
#   scripts/altered-runtime.sh VARIANT
#
# VARIANT, each a small patch of the runtime alone (the compiler, the standard library and the
# samples' code are the 5.3.0 toolchain's):
#   pool-size            pools of 8192 words instead of 4096 (runtime/caml/sizeclasses.h,
#                        its wasted words recomputed)
#   domain-field         a member added to caml_domain_state after dls_root, in the middle
#                        of the structure (after every member compiled OCaml code reads but
#                        extra_params)
#   continuation-field   continuations promoted to the major heap get a third field
#                        (runtime/minor_gc.c)
#   header-bits          8 reserved header bits in the runtime (runtime/caml/m.h) without
#                        configure's --enable-reserved-header-bits, which the compiler would
#                        have been told of
#   free-runs            OCaml 5.4's free pool slots (ocaml/ocaml#13616): a run of free slots
#                        opens with a NOT_MARKABLE No_scan_tag header counting the free slots
#                        after it, which are not written (runtime/shared_heap.c)
#   mark-delay           OCaml 5.4's sweep-only phase (ocaml/ocaml#13580): each cycle sweeps
#                        before it marks, and allocates UNMARKED until marking starts
#                        (runtime/major_gc.c); ported for single-domain programs, as the
#                        samples are (a program whose domains terminate mid-cycle hangs)
#   idle-phase           OCaml 5.5's idle phase (ocaml/ocaml#14365) on top of mark-delay: a
#                        program starts idle, and each cycle idles after its sweep, allocating
#                        UNMARKED, until the cycle's allocation passes the minor heap's size
#                        (small_heap_limit's default); a forced cycle (full major, compaction)
#                        marks at once
#
# Only the runtime library is rebuilt (`make runtime/libasmrun.a` in a configured 5.3.0 source
# tree, cached), then installed as libasmrun_VARIANT.a beside the samples, which are linked
# with `-runtime-variant _VARIANT`. The samples (cache_leak, effect_cont, long_list) use neither
# systhreads nor unix, whose C stubs were compiled against the unaltered runtime's headers.
#
# Everything is cached in ${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/altered-5.3.0/, outside the
# repository; a variant is rebuilt when this script or the samples change. Exit status 3: the
# 5.3.0 toolchain cannot be built here.
set -euo pipefail

variant="${1:-}"
case "$variant" in
  pool-size | domain-field | continuation-field | header-bits | free-runs | mark-delay | idle-phase) ;;
  *) echo "usage: scripts/altered-runtime.sh pool-size|domain-field|continuation-field|header-bits|free-runs|mark-delay|idle-phase" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$here/.."
prefix="$("$here/ocaml-toolchain.sh" 5.3.0)" || exit $?
cache="${HEAPSNAP_CACHE:-$HOME/.cache/heapsnap}/altered-5.3.0"
out="$cache/$variant"
samples=(cache_leak effect_cont long_list)
mkdir -p "$cache"

up_to_date() {
  local s
  for s in "${samples[@]}"; do
    [ "$out/$s" -nt "${BASH_SOURCE[0]}" ] && [ "$out/$s" -nt "$repo/samples/$s.ml" ] &&
      [ "$out/$s" -nt "$repo/samples/heapsnap_sample.ml" ] || return 1
  done
}
if up_to_date; then echo "$out"; exit 0; fi

exec 9>"$cache/.lock"
flock 9
if up_to_date; then echo "$out"; exit 0; fi

# A configured 5.3.0 source tree, made once.
source_tree="$cache/source"
if [ ! -f "$source_tree/.heapsnap-configured" ]; then
  rm -rf "$source_tree"
  mkdir -p "$source_tree"
  echo "altered-runtime: configuring OCaml 5.3.0's source in $source_tree" >&2
  (
    cd "$source_tree"
    npm pack --silent ocaml@5.3.0 >/dev/null
    tar xzf ocaml-*.tgz
    rm -f ocaml-*.tgz
    cd package
    ./configure --prefix="$prefix" --disable-ocamldoc --disable-ocamltest --disable-debugger \
      --disable-debug-runtime --disable-stdlib-manpages >configure.log 2>&1
  ) || { echo "altered-runtime: configure failed (see $source_tree/package/configure.log)" >&2; exit 1; }
  touch "$source_tree/.heapsnap-configured"
fi

work="$(mktemp -d "$cache/build-$variant.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp -a "$source_tree/package/." "$work/"

# Each patch must change what it means to change, or the build fails.
patch_runtime() {
  python3 - "$work" "$variant" <<'PY'
import re, sys
root, variant = sys.argv[1], sys.argv[2]

def edit(path, old, new, count=1):
    p = f"{root}/{path}"
    s = open(p).read()
    if s.count(old) != count:
        sys.exit(f"altered-runtime: {path}: expected {count} of {old!r}, found {s.count(old)}")
    open(p, "w").write(s.replace(old, new))

if variant == "pool-size":
    p = f"{root}/runtime/caml/sizeclasses.h"
    s = open(p).read()
    header = int(re.search(r"#define POOL_HEADER_WSIZE (\d+)", s).group(1))
    wsize = [int(x) for x in re.search(r"wsize_sizeclass\[NUM_SIZECLASSES\] =\s*\{([^}]*)\}", s).group(1).split(",")]
    wastage = [(8192 - header) % w for w in wsize]
    s = s.replace("#define POOL_WSIZE 4096", "#define POOL_WSIZE 8192")
    s, n = re.subn(r"(wastage_sizeclass\[NUM_SIZECLASSES\] =\s*)\{[^}]*\}", lambda m: m.group(1) + "{ " + ", ".join(map(str, wastage)) + " }", s)
    if n != 1 or "#define POOL_WSIZE 8192" not in s:
        sys.exit("altered-runtime: sizeclasses.h is not as expected")
    open(p, "w").write(s)
elif variant == "domain-field":
    edit("runtime/caml/domain_state.tbl", "DOMAIN_STATE(value, dls_root)\n",
         "DOMAIN_STATE(value, dls_root)\n\nDOMAIN_STATE(uintnat, heapsnap_inserted_member)\n")
elif variant == "continuation-field":
    edit("runtime/minor_gc.c", "result = alloc_shared(st->domain, 2, Cont_tag, Reserved_hd(hd));",
         "result = alloc_shared(st->domain, 3, Cont_tag, Reserved_hd(hd));")
    edit("runtime/minor_gc.c", "      Field(result, 1) = Field(v, 1);\n",
         "      Field(result, 1) = Field(v, 1);\n      Field(result, 2) = Val_unit;\n")
    edit("runtime/minor_gc.c", "*Hp_val(result) = Make_header(1, No_scan_tag,", "*Hp_val(result) = Make_header(2, No_scan_tag,")
elif variant == "header-bits":
    edit("runtime/caml/m.h", "#define HEADER_RESERVED_BITS 0", "#define HEADER_RESERVED_BITS 8")
elif variant == "free-runs":
    # ocaml/ocaml#13616 (OCaml 5.4): a free pool slot's header is NOT_MARKABLE with
    # No_scan_tag, its size the number of free slots that follow it (a run); only a run's
    # first slot is written, the others keep what they held. Field 0 of a run's first slot
    # links to the next run (where the link lives the description does not say).
    sh = "runtime/shared_heap.c"
    edit(sh, "#define POOL_END(p) ((header_t*)(p) + POOL_WSIZE)\n",
         "#define POOL_END(p) ((header_t*)(p) + POOL_WSIZE)\n"
         "#define POOL_BLOCK_FREE_HD(hd) \\\n"
         "  (Tag_hd(hd) == No_scan_tag && Has_status_hd(hd, NOT_MARKABLE))\n"
         "#define POOL_FREE_HEADER(following) \\\n"
         "  Make_header(following, No_scan_tag, NOT_MARKABLE)\n"
         "/* The first free slot of the run at [p], taken: the next free slot. */\n"
         "Caml_inline value* pool_take_free(value* p, mlsize_t wh)\n"
         "{\n"
         "  mlsize_t following = Wosize_hd((header_t)p[0]);\n"
         "  if (following == 0) return (value*)p[1];\n"
         "  p[wh + 1] = p[1];\n"
         "  p[wh] = POOL_FREE_HEADER(following - 1);\n"
         "  return p + wh;\n"
         "}\n")
    # A pool is one run.
    edit(sh, """  p[0] = 0;
  p[1] = 0;
  p += wh;

  while (p + wh <= end) {
    p[0] = 0; /* zero header indicates free object */
    p[1] = (value)(p - wh);
    #ifdef DEBUG
    for (int w = 2 ; w < wh; w++) {
      p[w] = Debug_free_major;
    }
    #endif
    p += wh;
  }
  CAMLassert(p == end);
  CAMLassert((uintptr_t)end % Cache_line_bsize == 0);
  r->next_obj = (value*)(p - wh);
""", """  p[0] = POOL_FREE_HEADER((end - p) / wh - 1);
  p[1] = 0;
  r->next_obj = (value*)p;
""")
    edit(sh, """  next = (value*)p[1];
  r->next_obj = next;
  CAMLassert(p[0] == 0);
""", """  next = pool_take_free(p, wsize_sizeclass[sz]);
  r->next_obj = next;
""")
    edit(sh, "  CAMLassert(r->next_obj == 0 || *r->next_obj == 0);\n", "")
    # Sweeping jumps over runs; a swept block is a run of one.
    edit(sh, """      if (hd == 0) {
        /* already on freelist */
        all_used = 0;""", """      if (POOL_BLOCK_FREE_HD(hd)) {
        /* already on freelist */
        all_used = 0;
        p += wh * Wosize_hd(hd);""")
    edit(sh, "        atomic_store_relaxed((atomic_uintnat*)p, 0);\n",
         "        atomic_store_relaxed((atomic_uintnat*)p, POOL_FREE_HEADER(0));\n")
    # Every other walk over a pool's slots jumps over runs too.
    edit(sh, """    header_t hd = (header_t)atomic_load_relaxed((atomic_uintnat*)p);
    if (hd) {""", """    header_t hd = (header_t)atomic_load_relaxed((atomic_uintnat*)p);
    if (POOL_BLOCK_FREE_HD(hd)) {
      p += wh * Wosize_hd(hd);
    } else {""")
    edit(sh, "    if (hd != 0 && Has_status_hd(hd, caml_global_heap_state.MARKED)) {",
         "    if (POOL_BLOCK_FREE_HD(hd)) {\n      p += wh * Wosize_hd(hd);\n"
         "    } else if (Has_status_hd(hd, caml_global_heap_state.MARKED)) {")
    edit(sh, """      if (*p &&
          Has_status_val(Val_hp(p), caml_global_heap_state.UNMARKED)) {""",
         """      if (POOL_BLOCK_FREE_HD(*p)) {
        p += wh * Wosize_hd(*p);
      } else if (Has_status_val(Val_hp(p), caml_global_heap_state.UNMARKED)) {""")
    edit(sh, """        if (!h) {
          pool_stats[k].free_blocks++;""", """        if (POOL_BLOCK_FREE_HD(h)) {
          pool_stats[k].free_blocks += 1 + Wosize_hd(h);
          p += wh * Wosize_hd(h);""")
    edit(sh, """        if (hd) {
          CAMLassert (!Has_status_hd(hd, caml_global_heap_state.MARKED));""",
         """        if (POOL_BLOCK_FREE_HD(hd)) {
          p += wh * Wosize_hd(hd);
        } else {
          CAMLassert (!Has_status_hd(hd, caml_global_heap_state.MARKED));""")
    edit(sh, "            value *next = (value*)new_p[1];\n", "            value *next = pool_take_free(new_p, wh);\n")
elif variant in ("mark-delay", "idle-phase"):
    # ocaml/ocaml#13580 (OCaml 5.4): each major cycle opens with a sweep-only phase,
    # Phase_sweep_main, in which nothing is marked and new blocks of the shared heap are
    # allocated UNMARKED. Marking (the roots, then the ephemerons' todo list) starts when a
    # domain has swept, with the minor heaps empty, in a stop-the-world section.
    # ocaml/ocaml#14365 (OCaml 5.5), idle-phase: after the sweep the cycle idles
    # (Phase_idle, still allocating UNMARKED) until the cycle has allocated more than
    # small_heap_limit, whose default is the minor heap's size; a program starts idle, and a
    # forced cycle (one run from a stop-the-world section) marks at once. The description
    # counts GC work units, as alloc_counter does, not words. Phase_idle is set outside a
    # stop-the-world section, which only single-domain programs allow.
    idle = variant == "idle-phase"
    mg = "runtime/major_gc.c"
    if idle:
        edit("runtime/caml/major_gc.h", "typedef enum {\n  Phase_sweep_and_mark_main,",
             "typedef enum {\n  Phase_idle,\n  Phase_sweep_main,\n  Phase_sweep_and_mark_main,")
        edit("runtime/caml/major_gc.h", "extern gc_phase_t caml_gc_phase;\n",
             "extern gc_phase_t caml_gc_phase;\n#define Caml_marking_not_started \\\n"
             "  (caml_gc_phase == Phase_sweep_main || caml_gc_phase == Phase_idle)\n")
        edit(mg, "static atomic_uintnat work_counter;\n",
             "static atomic_uintnat work_counter;\n/* alloc_counter when the cycle started. */\n"
             "static atomic_uintnat cycle_alloc_start;\n")
        edit(mg, "  caml_gc_phase = Phase_sweep_and_mark_main;\n  atomic_store(&ephe_cycle_info.num_domains_todo",
             "  atomic_store(&cycle_alloc_start, atomic_load(&alloc_counter));\n"
             "  caml_gc_phase = Phase_sweep_and_mark_main;\n  atomic_store(&ephe_cycle_info.num_domains_todo")
        not_marking = "Caml_marking_not_started"
    else:
        edit("runtime/caml/major_gc.h", "typedef enum {\n  Phase_sweep_and_mark_main,",
             "typedef enum {\n  Phase_sweep_main,\n  Phase_sweep_and_mark_main,")
        not_marking = "caml_gc_phase == Phase_sweep_main"
    edit(mg, "  caml_gc_phase = Phase_sweep_and_mark_main;\n  atomic_store(&ephe_cycle_info.num_domains_todo",
         "  caml_gc_phase = Phase_sweep_main;\n  atomic_store(&ephe_cycle_info.num_domains_todo")
    s = open(f"{root}/{mg}").read()
    start = s.index("  CAML_EV_BEGIN(EV_MAJOR_MARK_ROOTS);\n  caml_do_roots (&caml_darken")
    end = s.index("    ephe_todo_list_emptied();\n", start) + len("    ephe_todo_list_emptied();\n")
    roots = s[start:end].replace("  if (domain->mark_stack->count == 0 &&",
                                  "  if (!domain->marking_done && domain->mark_stack->count == 0 &&")
    if roots == s[start:end]:
        sys.exit("altered-runtime: major_gc.c: the roots' marking is not as expected")
    s = s[:start] + s[end:]
    marking = (
        "/* The end of the sweep-only phase: the roots are marked, with the minor heaps empty,\n"
        "   and the ephemerons go to the todo list. */\n"
        "static void stw_start_marking(caml_domain_state* domain, void* unused,\n"
        "                              int participating_count,\n"
        "                              caml_domain_state** participating)\n"
        "{\n"
        "  caml_empty_minor_heap_no_major_slice_from_stw\n"
        "    (domain, (void*)0, participating_count, participating);\n"
        f"  int start = {not_marking};\n"
        "  caml_global_barrier(participating_count);\n"
        "  if (!start) return;\n"
        "  Caml_global_barrier_if_final(participating_count) {\n"
        "    caml_gc_phase = Phase_sweep_and_mark_main;\n"
        "  }\n"
        + roots +
        "  caml_global_barrier(participating_count);\n"
        "}\n\n")
    anchor2 = "struct cycle_callback_params {\n"
    if s.count(anchor2) != 1:
        sys.exit("altered-runtime: major_gc.c: no cycle_callback_params")
    s = s.replace(anchor2, marking + anchor2)
    open(f"{root}/{mg}", "w").write(s)
    edit(mg, "mark_again:\n  if (!domain_state->marking_done &&\n",
         f"  if (mode != Slice_opportunistic && {not_marking} &&\n"
         "      (barrier_participants || domain_state->sweeping_done)) {\n"
         + ("    if (caml_gc_phase == Phase_sweep_main) caml_gc_phase = Phase_idle;\n" if idle else "") +
         "    if (barrier_participants)\n"
         "      stw_start_marking(domain_state, (void*)0, participant_count,\n"
         "                        barrier_participants);\n"
         + ("    else if (diffmod(atomic_load(&alloc_counter), atomic_load(&cycle_alloc_start))\n"
            "             > (intnat)domain_state->minor_heap_wsz)\n" if idle else "    else\n") +
         "      caml_try_run_on_all_domains(&stw_start_marking, 0, 0);\n"
         "  }\n\n"
         f"mark_again:\n  if (!({not_marking}) && !domain_state->marking_done &&\n")
    # Only a terminating domain empties its mark stack outside a slice: in the sweep-only
    # phase it has nothing to mark, and its ephemerons' todo list is empty.
    edit(mg, "void caml_empty_mark_stack (void)\n{\n",
         "void caml_empty_mark_stack (void)\n{\n"
         f"  if ({not_marking}) {{\n"
         "    if (!Caml_state->marking_done) {\n"
         "      Caml_state->marking_done = 1;\n"
         "      atomic_fetch_add_verify_ge0(&num_domains_to_mark, -1);\n"
         "      ephe_todo_list_emptied();\n"
         "    }\n"
         "    return;\n"
         "  }\n")
    edit(mg, "void caml_darken(void* state, value v, volatile value* ignored) {\n  header_t hd;\n",
         "void caml_darken(void* state, value v, volatile value* ignored) {\n  header_t hd;\n"
         f"  if ({not_marking}) return;\n")
    edit(mg, "void caml_darken_cont(value cont)\n{\n",
         "void caml_darken_cont(value cont)\n{\n" f"  if ({not_marking}) return;\n")
    edit("runtime/shared_heap.c", "  colour = caml_global_heap_state.MARKED;\n",
         f"  colour = ({not_marking}) ? caml_global_heap_state.UNMARKED\n"
         "                           : caml_global_heap_state.MARKED;\n")
PY
}

echo "altered-runtime: building the $variant runtime (log in $work/build.log)" >&2
(
  patch_runtime
  make -C "$work" -j"$(nproc)" runtime/libasmrun.a
) >"$work/build.log" 2>&1 || {
  echo "altered-runtime: build of $variant failed; last lines of the log:" >&2
  tail -n 30 "$work/build.log" >&2
  exit 1
}

staging="$(mktemp -d "$cache/out-$variant.XXXXXX")"
cp "$work/runtime/libasmrun.a" "$staging/libasmrun_$variant.a"
ocamlopt="$prefix/bin/ocamlopt"
(
  cd "$staging"
  "$ocamlopt" -g -c -o heapsnap_sample.cmx "$repo/samples/heapsnap_sample.ml"
  for s in "${samples[@]}"; do
    "$ocamlopt" -g -I . -c -o "$s.cmx" "$repo/samples/$s.ml"
    "$ocamlopt" -g -I . -runtime-variant "_$variant" heapsnap_sample.cmx "$s.cmx" -o "$s"
  done
  rm -f ./*.cm* ./*.o
) >"$work/link.log" 2>&1 || {
  echo "altered-runtime: linking the $variant samples failed:" >&2
  tail -n 30 "$work/link.log" >&2
  rm -rf "$staging"
  exit 1
}
rm -rf "$out"
mv "$staging" "$out"
echo "$out"
