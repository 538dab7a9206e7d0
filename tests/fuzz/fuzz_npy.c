/* fuzz_npy.c — libFuzzer target: the .npy reader (magic, version, header dictionary, shape,
 * exact data size) as float32 tensors of every rank and as lengths. */
#include <string.h>

#include "fuzz_input.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_path(data, size);
    char err[512] = "";
    mha_npy_header h;
    mha_status st = mha_npy_open(path, &h, err, sizeof err);
    if (st != MHA_OK && !err[0])
        abort();
    for (int rank = 1; rank <= 4; rank++) {
        int64_t shape[4];
        float *x = NULL;
        err[0] = '\0';
        st = mha_npy_load_f32(path, rank, shape, &x, err, sizeof err);
        if (st != MHA_OK && (!err[0] || x))
            abort(); /* a failure explains itself and hands back nothing */
        free(x);
    }
    int64_t n;
    int32_t *len = NULL;
    st = mha_npy_load_lengths(path, &n, &len, 1 << 20, err, sizeof err);
    if (st != MHA_OK && len)
        abort();
    free(len);
    return 0;
}
