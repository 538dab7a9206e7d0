/* weights.h — packing user weights into the per-head layout the kernel reads. */
#ifndef MHA_WEIGHTS_H
#define MHA_WEIGHTS_H

#include "arena.h"
#include "mha.h"

/* MHA_OK or MHA_ERR_INVALID_ARG (missing matrix, biases that disagree with the config,
 * unknown layout); on error nothing is written. */
mha_status mha_weights_check(const mha_weights *w, int bias);
/* Copies w into views->wqkv/bqkv/wo/bo in the kernel's panel form (see arena.h). */
void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *views);

#endif
