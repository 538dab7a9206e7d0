/* alloc.c — large blocks on pages (alloc.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "alloc.h"

#include <stdlib.h>
#include <sys/mman.h>

void *mha_alloc_pages(size_t bytes)
{
    const size_t align = bytes >= MHA_HUGE_PAGE ? MHA_HUGE_PAGE : MHA_PAGE;
    const size_t rounded = (bytes + align - 1) / align * align;
    void *p = rounded < bytes ? NULL : aligned_alloc(align, rounded);
    if (p && align == MHA_HUGE_PAGE)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: without THP the pages stay small */
    return p;
}
