/* fuzz_input.h — the loaders take paths, so each fuzz input is written to an in-memory file
 * (memfd) and handed over as /proc/self/fd/N: no disk traffic, one file reused per process.
 * Built with -D_GNU_SOURCE (memfd_create). */
#ifndef MHA_FUZZ_INPUT_H
#define MHA_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *fuzz_path(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("mha-fuzz", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    return path;
}

#endif
