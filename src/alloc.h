/* alloc.h — the library's one allocator of large blocks (engines' arenas, packed weights, KV
 * caches) and the alignments every layout keeps. */
#ifndef MHA_ALLOC_H
#define MHA_ALLOC_H

#include <stddef.h>

#define MHA_ALIGN 64   /* every region; also what mha_create_static requires of ws */
#define MHA_PAGE 4096  /* worker slices start on their own pages: first touch, no false sharing */
#define MHA_HUGE_PAGE (2u << 20)

/* At least `bytes`, page-aligned (free() it); from 2 MiB on, 2 MiB-aligned and rounded, with
 * Linux asked for transparent huge pages (madvise, where THP is "madvise"): weights and KV
 * caches streamed by every step then cost a TLB entry per 2 MiB, not per 4 KiB. NULL when it
 * cannot be had. */
void *mha_alloc_pages(size_t bytes);

#endif
