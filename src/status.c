/* status.c — names of status codes, error messages, the library version. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>

#define MHA_STR2(x) #x
#define MHA_STR(x) MHA_STR2(x)

MHA_API const char *mha_status_str(mha_status s)
{
    switch (s) {
    case MHA_OK: return "ok";
    case MHA_ERR_INVALID_ARG: return "invalid argument";
    case MHA_ERR_CONFIG: return "invalid config";
    case MHA_ERR_SHAPE: return "shape out of range";
    case MHA_ERR_NOMEM: return "out of memory";
    case MHA_ERR_WORKSPACE: return "workspace too small or misaligned";
    case MHA_ERR_IO: return "i/o error";
    case MHA_ERR_FORMAT: return "malformed file";
    case MHA_ERR_AFFINITY: return "cpu affinity request cannot be met";
    case MHA_ERR_STATE: return "call out of order";
    }
    return "unknown status";
}

MHA_API int mha_version_number(void)
{
    return MHA_VERSION_NUMBER;
}

MHA_API const char *mha_version_string(void)
{
    return MHA_STR(MHA_VERSION_MAJOR) "." MHA_STR(MHA_VERSION_MINOR) "." MHA_STR(MHA_VERSION_PATCH);
}

mha_status mha_errorf(char *err, size_t err_len, mha_status s, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return s;
}

mha_status mha_problemf(mha_problem *pr, mha_status s, const char *field, const char *fmt, ...)
{
    if (pr) {
        snprintf(pr->field, sizeof pr->field, "%s", field);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pr->what, sizeof pr->what, fmt, ap);
        va_end(ap);
    }
    return s;
}

void mha_problem_text(const mha_problem *pr, char *err, size_t err_len)
{
    if (err && err_len)
        snprintf(err, err_len, "%s: %s", pr->field, pr->what);
}

void mha_shape_text(const int64_t *shape, int rank, char *out, size_t n)
{
    size_t k = (size_t)snprintf(out, n, "(");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "%s)", rank == 1 ? "," : "");
}
