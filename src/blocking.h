/* blocking.h — the fixed sizes every layer agrees on: how rows, keys and columns are cut into
 * tasks, chunks and tiles. They are constants, not tuning knobs: each is part of the bitwise
 * contract (a row's sums never depend on the thread count, the batch or how a sequence's steps
 * were cut) or of a kernel table's promise, so the forward, the steps, the kernel tables and
 * the arena's sizes read them from here alone. Includes nothing of the engine. */
#ifndef MHA_BLOCKING_H
#define MHA_BLOCKING_H

#include <stddef.h>

/* Rows of one output-projection task and of one input-packing task: fixed, so results never
 * depend on the thread count. MHA_PACK_BLOCK is a multiple of every microkernel's row panel. */
#define MHA_OUT_BLOCK 128
#define MHA_PACK_BLOCK 192

/* Keys per chunk of the softmax, in the forward and in decode alike: chunk c holds the keys
 * [c·MHA_KV_CHUNK, (c + 1)·MHA_KV_CHUNK) counted from position 0, whatever the query block,
 * window or step (so a row's sums never depend on how its tokens were split). Each chunk is
 * exp'd against its own max, its A·V summed on its own, and the chunks merged in key order by
 * mha_softmax_merge. A multiple of every B panel width (8, 16, 32) and at most every
 * sub-config's KC (256 or 384), so one chunk's A·V is one pass of the microkernel: the sums a
 * decode tile reproduces. Also the most slots one decode_scores call takes (isa.h). */
#define MHA_KV_CHUNK 256

/* Keys per Kᵀ panel that the float32 decode tiles read (mha_kv_view.ktp): one slot vector. */
#define MHA_TILE_KEYS 16

/* The widest d_k a table's rows_scores takes (its queries' features transposed on the stack). */
#define MHA_ROWS_SCORES_DK 256

/* Decoding: a sequence bringing at most MHA_DECODE_MAX_NEW new tokens to a step attends straight
 * from the cache, its context cut into the forward's chunks of MHA_KV_CHUNK keys (one task
 * each, merged in order by the forward's rule: a split fixed by positions alone, so outputs
 * depend neither on the thread count nor on how the sequence's steps were cut). The core's
 * few queries run as decode does. */
#define MHA_DECODE_MAX_NEW 4

/* Floats of one decode chunk's partial results of a (sequence, KV head): each of the group's
 * queries (group·MHA_DECODE_MAX_NEW at most) its Z (dk), running max and sum; the partial
 * region holds (batch, kvh, chunks) of them (step.c's partial_of indexes it). */
static inline size_t mha_step_partial_floats(int group, int dk)
{
    return (size_t)group * MHA_DECODE_MAX_NEW * ((size_t)dk + 2);
}

/* Columns of one output-projection task of a step with few rows (a multiple of every B panel
 * width: 8, 16, 32, 64). */
#define MHA_OUT_COLS 512

/* MLA: rows of one projection task and of one output task: fixed, so results never depend on
 * the thread count (a row's sums never depend on how many rows share its product either). */
#define MHA_MLA_ROWS 64

#endif
