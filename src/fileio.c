/* fileio.c — opening inputs safely and writing outputs complete-or-absent (fileio.h). */
#define _GNU_SOURCE /* O_CLOEXEC, realpath */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "status.h"

mha_status mha_file_open_read(const char *path, FILE **out, char *err, size_t err_len)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO with no writer would wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (S_ISDIR(st.st_mode))
        why = "is a directory, not a file";
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file (a FIFO, device or socket)";
    else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
        why = strerror(errno);
    FILE *f = why ? NULL : fdopen(fd, "rb");
    if (!f) {
        if (!why)
            why = strerror(errno);
        close(fd);
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: %s%s", path, strncmp(why, "is a", 4) && strncmp(why, "not a", 5) ? "cannot open: " : "", why);
    }
    *out = f;
    return MHA_OK;
}

mha_status mha_file_read_all(const char *path, size_t max, char **buf, size_t *len, char *err, size_t err_len)
{
    FILE *f;
    mha_status st = mha_file_open_read(path, &f, err, err_len);
    if (st != MHA_OK)
        return st;
    char *b = malloc(max + 1);
    if (!b) {
        fclose(f);
        return mha_errorf(err, err_len, MHA_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t n = fread(b, 1, max + 1, f);
    int failed = ferror(f);
    fclose(f);
    if (failed || n > max) {
        free(b);
        return failed ? mha_errorf(err, err_len, MHA_ERR_IO, "%s: read error", path) : MHA_ERR_FORMAT;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return MHA_OK;
}

mha_status mha_file_map_read(const char *path, const void **map, size_t *size, char *err, size_t err_len)
{
    *map = NULL, *size = 0;
    FILE *f;
    mha_status st = mha_file_open_read(path, &f, err, err_len);
    if (st != MHA_OK)
        return st;
    struct stat sb;
    void *p = NULL;
    const char *why = NULL;
    if (fstat(fileno(f), &sb) != 0)
        why = strerror(errno);
    else if ((uint64_t)sb.st_size > SIZE_MAX)
        why = "larger than the address space";
    else if (sb.st_size > 0 && (p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fileno(f), 0)) == MAP_FAILED)
        why = strerror(errno);
    fclose(f); /* the mapping outlives the descriptor */
    if (why)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot map: %s", path, why);
    *map = p;
    *size = (size_t)sb.st_size;
    return MHA_OK;
}

void mha_file_unmap(const void *map, size_t size)
{
    if (map && size)
        munmap((void *)map, size);
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w, n -= (size_t)w;
    }
    return 0;
}

/* A FIFO or character device: written in place, never replaced. */
static mha_status write_through(const char *path, const void *head, size_t hl, const void *body, size_t bl, char *err,
                                size_t err_len)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    int ok = write_all(fd, head, hl) == 0 && write_all(fd, body, bl) == 0;
    int saved = errno;
    close(fd);
    return ok ? MHA_OK : mha_errorf(err, err_len, MHA_ERR_IO, "%s: write failed: %s", path, strerror(saved));
}

mha_status mha_file_write(const char *path, const void *head, size_t head_len, const void *body, size_t body_len,
                          char *err, size_t err_len)
{
    struct stat st;
    char target[PATH_MAX];
    mode_t mode = 0666; /* a new file: the umask applies at open */
    int exists = stat(path, &st) == 0;
    if (exists) {
        if (S_ISDIR(st.st_mode))
            return mha_errorf(err, err_len, MHA_ERR_IO, "%s: is a directory, not a file", path);
        if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))
            return write_through(path, head, head_len, body, body_len, err, err_len);
        if (!S_ISREG(st.st_mode))
            return mha_errorf(err, err_len, MHA_ERR_IO, "%s: not a regular file, FIFO or character device", path);
        if (!realpath(path, target)) /* a symlink's target is replaced, not the link */
            return mha_errorf(err, err_len, MHA_ERR_IO, "%s: %s", path, strerror(errno));
        mode = st.st_mode & 07777;
    } else if (snprintf(target, sizeof target, "%s", path) >= (int)sizeof target) {
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: path too long", path);
    }

    /* a temporary name of our own beside the target: pid, time and a counter on the stack's
     * address keep concurrent writers (threads, processes, MPI ranks) apart; O_EXCL refuses
     * anything already there */
    char tmp[PATH_MAX + 64];
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (unsigned i = 0; fd < 0 && i < 100; i++) {
        unsigned long tag = (unsigned long)ts.tv_nsec ^ ((unsigned long)(uintptr_t)&fd >> 4) ^ i * 2654435761u;
        if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lx", target, (long)getpid(), tag) >= (int)sizeof tmp)
            return mha_errorf(err, err_len, MHA_ERR_IO, "%s: path too long", path);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, mode);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0)
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: cannot create a file beside it: %s", path, strerror(errno));
    int ok = write_all(fd, head, head_len) == 0 && write_all(fd, body, body_len) == 0;
    if (ok && exists)
        ok = fchmod(fd, mode) == 0; /* the umask may have narrowed the old mode */
    ok = ok && fsync(fd) == 0;
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, target) != 0) {
        if (ok)
            saved = errno;
        unlink(tmp);
        return mha_errorf(err, err_len, MHA_ERR_IO, "%s: write failed: %s", path, strerror(saved));
    }
    return MHA_OK;
}
