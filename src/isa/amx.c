/* amx.c — the AMX-BF16 products of the avx512 table: a 32 × 32 block of C in four accumulator
 * tiles (2 × 2: each A and B tile load feeds two tdpbf16ps), the tile configuration entered
 * once per worker and stretch of work (mha_bk_begin), and Linux's tile data permission, asked
 * for once at create (mha_bkernel_enable), never by a check. Sums: MHA_BK_TILE_LANES (bgemm.h),
 * the order read from the hardware's own bits (a Sapphire Rapids Xeon's), so that the tests
 * hold the kernel to it bit for bit. */
#define _GNU_SOURCE /* syscall */
#include "isa.h"

#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* The CPU has AMX-BF16 and the kernel supports its tile data (a query: nothing changes). */
static int amx_usable(void)
{
    if (!mha_cpu_has("amx_tile") || !mha_cpu_has("amx_bf16") || !mha_cpu_has("avx512f"))
        return 0;
    unsigned long features = 0;
    return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &features) == 0 && (features >> XFEATURE_XTILEDATA & 1u);
}

/* Linux grants a process the tile data state only on request (once is enough; asking again is
 * harmless). Without it the first tile instruction raises SIGILL. */
static int amx_enable(void)
{
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

__attribute__((target("amx-tile"))) static void amx_begin(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++)
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    /* Not gcc 12's _tile_loadconfig: its asm operand is the first 8 bytes of the config only,
     * so the rest of the struct is dead to the compiler, its stores are dropped, and
     * ldtilecfg faults on the stack garbage (#GP: SIGSEGV). The operand here is all 64. */
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

__attribute__((target("amx-tile"))) static void amx_end(void)
{
    _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) static void amx_block(int rows, int npan, int kt, const mha_bf16 *a,
                                                                   const mha_bf16 *b, size_t ps, float *acc, int pf)
{
    (void)pf;
    const mha_bf16 *a1 = a + mha_bk_a_row(MHA_BT_M, kt), *b1 = b + ps;
    const long s = 64; /* bytes per tile row, A and B alike */
    __asm__ volatile("" ::: "memory"); /* the packed panels are written before the tile loads read them */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    /* a k step's loads all issued before its products, so that they overlap one another and the
     * step before's products instead of each product waiting on the load just before it */
    for (int t = 0; t < kt; t++) {
        const size_t o = (size_t)t * MHA_BT_ELEMS;
        _tile_loadd(4, a + o, s);
        _tile_loadd(6, b + o, s);
        if (npan == 2)
            _tile_loadd(7, b1 + o, s);
        if (rows > 16)
            _tile_loadd(5, a1 + o, s);
        _tile_dpbf16ps(0, 4, 6);
        if (npan == 2)
            _tile_dpbf16ps(1, 4, 7);
        if (rows > 16) {
            _tile_dpbf16ps(2, 5, 6);
            if (npan == 2)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    const long sc = 32 * sizeof(float);
    _tile_stored(0, acc, sc);
    if (npan == 2)
        _tile_stored(1, acc + 16, sc);
    if (rows > 16) {
        _tile_stored(2, acc + 16 * 32, sc);
        if (npan == 2)
            _tile_stored(3, acc + 16 * 32 + 16, sc);
    }
}

const mha_bkernel mha_bk_amx = {
    .name = "amx-bf16",
    .order = MHA_BK_TILE_LANES,
    .usable = amx_usable,
    .lacks = "this CPU has no AMX-BF16, or Linux does not support its tile data",
    .enable = amx_enable,
    .begin = amx_begin,
    .end = amx_end,
    .block = amx_block,
};
