/* weights.h — packing user weights into the per-head layout the kernel reads. */
#ifndef MHA_WEIGHTS_H
#define MHA_WEIGHTS_H

#include "arena.h"
#include "mha.h"

/* MHA_OK or MHA_ERR_INVALID_ARG (w NULL, a missing matrix, biases, QK-norm weights or sinks
 * that disagree with the config, an unknown layout), with why in why (when not NULL). */
mha_status mha_weights_check(const mha_weights *w, const mha_dims *dims, char *why, size_t why_len);
/* Copies w into views->wqkv/bqkv/wo/bo in the kernel's panel form (see arena.h), QK-norm's
 * factors (w, or 1 + w) into views->qk_norm and the sinks into views->sinks. */
void mha_weights_pack(const mha_weights *w, const mha_dims *dims, const mha_kernel *k, int dkp,
                      const mha_arena_views *views);

#endif
