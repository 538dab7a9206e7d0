/* fileio.h — the file operations every loader and writer shares: read only regular files
 * (a FIFO or device never blocks an open), map them read-only, and write complete-or-absent. */
#ifndef MHA_FILEIO_H
#define MHA_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "mha.h"

/* Opens a regular file for reading. MHA_ERR_IO with "path: cannot open: why", "path: is a
 * directory" or "path: not a regular file (FIFO, device or socket)". */
mha_status mha_file_open_read(const char *path, FILE **out, char *err, size_t err_len);
/* The whole of a regular file of at most max bytes, malloc'd and NUL-terminated (*len
 * excludes the NUL). MHA_ERR_FORMAT (without a message) when it is larger than max. */
mha_status mha_file_read_all(const char *path, size_t max, char **buf, size_t *len, char *err, size_t err_len);
/* A regular file mapped read-only (MAP_PRIVATE), not copied: *map and *size (0 for an empty
 * file, then *map is NULL and nothing is mapped). The file may be closed meanwhile; the
 * mapping stays until mha_file_unmap. Errors as mha_file_open_read's, and "path: cannot map:
 * why". */
mha_status mha_file_map_read(const char *path, const void **map, size_t *size, char *err, size_t err_len);
void mha_file_unmap(const void *map, size_t size); /* accepts NULL */
/* Writes head then body to path. A regular file, or a path that does not exist yet, goes
 * through a temporary file beside it renamed into place (complete or absent; the old file's
 * mode kept, 0666 less the umask for a new one); a symbolic link is followed, so its target
 * is replaced, not the link. A FIFO or character device is written through. A directory or
 * anything else: MHA_ERR_IO. */
mha_status mha_file_write(const char *path, const void *head, size_t head_len, const void *body, size_t body_len,
                          char *err, size_t err_len);

#endif
