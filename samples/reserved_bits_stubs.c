/* C stubs for the reserved_bits sample (needs a runtime configured with
   --enable-reserved-header-bits=16; on a runtime without reserved bits the
   reserved value is silently dropped and heapsnap_reserved_of returns 0). */
#define CAML_INTERNALS /* Alloc_small_with_reserved is an internal macro */
#include <caml/mlvalues.h>
#include <caml/memory.h>
#include <caml/alloc.h>
#include <caml/fail.h>
#include <caml/version.h>

#if OCAML_VERSION_MAJOR < 5
/* OCaml 4.14 calls the reserved header bits "profinfo". */
typedef uintnat reserved_t;
#define caml_alloc_shr_reserved caml_alloc_shr_with_profinfo
#define Alloc_small_with_reserved(result, wosize, tag, gc, reserved) \
  Alloc_small_with_profinfo(result, wosize, tag, reserved)
/* What 4.14's Alloc_small does around a collection: no OCaml value is live here. */
#define Setup_for_gc
#define Restore_after_gc
#define Reserved_val(v) Profinfo_hd(Hd_val(v))
#ifdef WITH_PROFINFO
#define HEADER_RESERVED_BITS PROFINFO_WIDTH
#else
#define HEADER_RESERVED_BITS 0
#endif
#endif

/* A block of [wosize] fields, tag [tag], with [reserved] in the reserved
   header bits, allocated directly in the major heap. Fields are Val_long(i). */
value heapsnap_alloc_shr_reserved(value wosize, value tag, value reserved)
{
  mlsize_t sz = Long_val(wosize);
  if (sz == 0 || Int_val(tag) >= No_scan_tag) caml_invalid_argument("heapsnap_alloc_shr_reserved");
  value v = caml_alloc_shr_reserved(sz, Int_val(tag), (reserved_t) Long_val(reserved));
  for (mlsize_t i = 0; i < sz; i++) Field(v, i) = Val_long(i);
  /* caml_alloc_shr* results must be processed before the next allocation; */
  /* they only hold immediates, so there is nothing else to do. */
  return v;
}

/* Same, allocated in the minor heap with Alloc_small_with_reserved
   (wosize <= Max_young_wosize). The reserved bits survive promotion. */
value heapsnap_alloc_small_reserved(value wosize, value tag, value reserved)
{
  mlsize_t sz = Long_val(wosize);
  value v;
  if (sz == 0 || sz > Max_young_wosize || Int_val(tag) >= No_scan_tag)
    caml_invalid_argument("heapsnap_alloc_small_reserved");
  Alloc_small_with_reserved(v, sz, Int_val(tag), Alloc_small_enter_GC,
                            (reserved_t) Long_val(reserved));
  for (mlsize_t i = 0; i < sz; i++) Field(v, i) = Val_long(i);
  return v;
}

/* The reserved header bits of a block (0 for immediates). */
value heapsnap_reserved_of(value v)
{
  if (Is_long(v)) return Val_long(0);
  return Val_long(Reserved_val(v));
}

value heapsnap_reserved_header_bits(value unit)
{
  (void) unit;
  return Val_int(HEADER_RESERVED_BITS);
}
