/* fuzz_safetensors.c — libFuzzer target: the safetensors reader (header JSON scanner, every
 * structural check), then reading each float tensor, then the attention-weights loader for
 * the model sizes of the golden files. */
#include <string.h>

#include "fuzz_input.h"
#include "mha_io.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(data, size);
    char err[512] = "";
    mha_st_file sf;
    mha_status st = mha_st_open(path, &sf, err, sizeof err);
    if (st != MHA_OK && !err[0])
        abort();
    if (st == MHA_OK) {
        for (int i = 0; i < sf.n; i++) {
            const mha_st_tensor *t = &sf.t[i];
            uint64_t bytes = t->end - t->begin;
            if (!mha_st_is_float(t->dtype) || bytes > (1u << 20))
                continue;
            float *dst = malloc((size_t)bytes * 2 + 4); /* F16/BF16 widen to 4 bytes */
            if (dst)
                (void)mha_st_read_f32(&sf, t, dst, err, sizeof err);
            free(dst);
        }
        mha_st_close(&sf);
    }
    mha_weights_file wf;
    mha_config cfg;
    mha_config_init(&cfg);
    cfg.n_heads = 4;
    for (int d = 4; d <= 32; d *= 2) {
        cfg.d_model = d;
        st = mha_weights_file_load(path, NULL, &cfg, &wf, err, sizeof err);
        if (st == MHA_OK)
            mha_weights_file_free(&wf);
    }
    return 0;
}
