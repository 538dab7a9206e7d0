/* make_batch.c — writes the ragged batch that tests/mpi/test_mpi.sh shards: X.npy float32
 * (batch, seq, d) uniform in [-1, 1) and L.npy int32 lengths (some full, some short, one 0).
 * With "sparse", X.npy is a valid header followed by a hole (zeros, no disk blocks): a large
 * input for the out-of-memory test.
 * usage: make_batch X.npy L.npy BATCH SEQ D [sparse] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mha_io.h"

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7)
        return fprintf(stderr, "usage: %s X.npy L.npy BATCH SEQ D [sparse]\n", argv[0]), 2;
    int b = atoi(argv[3]), s = atoi(argv[4]), d = atoi(argv[5]);
    size_t n = (size_t)b * s * d;
    int64_t shape[3] = {b, s, d};
    if (argc == 7) {
        unsigned char h[MHA_NPY_MAX_HEADER];
        size_t hl = mha_npy_format_header("<f4", 3, shape, h, sizeof h);
        FILE *f = fopen(argv[1], "wb");
        if (!f || fwrite(h, 1, hl, f) != hl || fflush(f) || ftruncate(fileno(f), (off_t)(hl + n * sizeof(float))))
            return perror(argv[1]), 1;
        fclose(f);
        return 0;
    }
    float *x = malloc(n * sizeof *x);
    uint64_t z = 12345;
    for (size_t i = 0; i < n; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(z >> 40) / 16777216.0 * 2 - 1);
    }
    char err[256];
    if (mha_npy_save_f32(argv[1], x, 3, shape, err, sizeof err) != MHA_OK)
        return fprintf(stderr, "%s\n", err), 1;
    /* lengths: a ragged mix, int32 */
    unsigned char h[MHA_NPY_MAX_HEADER];
    int64_t n_len = b;
    size_t hl = mha_npy_format_header("<i4", 1, &n_len, h, sizeof h);
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(h, 1, hl, f) != hl)
        return perror(argv[2]), 1;
    for (int i = 0; i < b; i++) {
        int32_t len = i % 4 == 0 ? s : i % 4 == 1 ? s / 5 : i % 4 == 2 ? (i == 2 ? 0 : s / 2) : s - 3;
        fwrite(&len, sizeof len, 1, f);
    }
    free(x);
    return fclose(f) != 0;
}
