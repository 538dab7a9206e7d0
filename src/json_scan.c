/* json_scan.c — the strict JSON scanner of json_scan.h. */
#include "json_scan.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(mha_json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(mha_json *j, const char *fmt, ...)
{
    char what[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(j->msg, sizeof j->msg, "byte %zu: %s", j->pos, what);
    return 0;
}

void mha_json_init(mha_json *j, const char *text, size_t n)
{
    j->s = text, j->n = n, j->pos = 0, j->msg[0] = '\0';
}

static void ws(mha_json *j)
{
    while (j->pos < j->n && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' || j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
        j->pos++;
}

mha_json_kind mha_json_peek(mha_json *j)
{
    ws(j);
    if (j->pos >= j->n)
        return MHA_JSON_END;
    switch (j->s[j->pos]) {
    case '{': return MHA_JSON_OBJECT;
    case '[': return MHA_JSON_ARRAY;
    case '"': return MHA_JSON_STRING;
    case 't': case 'f': case 'n': return MHA_JSON_LITERAL;
    default:
        return j->s[j->pos] == '-' || (j->s[j->pos] >= '0' && j->s[j->pos] <= '9') ? MHA_JSON_NUMBER : MHA_JSON_BAD;
    }
}

int mha_json_expect(mha_json *j, char c)
{
    ws(j);
    if (j->pos < j->n && j->s[j->pos] == c) {
        j->pos++;
        return 1;
    }
    return j->pos < j->n ? fail(j, "expected '%c', found '%c'", c, j->s[j->pos]) : fail(j, "expected '%c', found the end", c);
}

int mha_json_next(mha_json *j, int first, char close)
{
    ws(j);
    if (j->pos < j->n && j->s[j->pos] == close) {
        j->pos++;
        return 0;
    }
    if (!first && !mha_json_expect(j, ','))
        return (void)fail(j, "expected ',' or '%c'", close), -1;
    return 1;
}

static int hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d > 15)
            return 0;
        *v = *v << 4 | d;
    }
    return 1;
}

/* Length of the valid UTF-8 sequence at p (at most left bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t left)
{
    size_t n;
    unsigned min;
    uint32_t c;
    if (p[0] < 0x80) return 1;
    if ((p[0] & 0xE0) == 0xC0) n = 2, min = 0x80, c = p[0] & 0x1F;
    else if ((p[0] & 0xF0) == 0xE0) n = 3, min = 0x800, c = p[0] & 0x0F;
    else if ((p[0] & 0xF8) == 0xF0) n = 4, min = 0x10000, c = p[0] & 0x07;
    else return 0;
    if (n > left)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = c << 6 | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    return n;
}

static size_t put_utf8(char *o, uint32_t c)
{
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | c >> 6); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | c >> 12); o[1] = (char)(0x80 | (c >> 6 & 0x3F)); o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | c >> 18); o[1] = (char)(0x80 | (c >> 12 & 0x3F));
    o[2] = (char)(0x80 | (c >> 6 & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* Scans (and, with out, decodes) the string at the cursor. */
static int scan_string(mha_json *j, char *out, size_t cap, size_t *len)
{
    if (!mha_json_expect(j, '"'))
        return 0;
    size_t k = 0;
    while (j->pos < j->n) {
        unsigned char c = (unsigned char)j->s[j->pos];
        if (c == '"') {
            j->pos++;
            if (out)
                out[k] = '\0';
            if (len)
                *len = k;
            return 1;
        }
        if (c < 0x20)
            return fail(j, "control character 0x%02x in a string", c);
        char buf[4];
        size_t w;
        if (c == '\\') {
            if (j->pos + 1 >= j->n)
                break;
            char e = j->s[j->pos + 1], plain = 0;
            switch (e) {
            case '"': case '\\': case '/': plain = e; break;
            case 'b': plain = '\b'; break;
            case 'f': plain = '\f'; break;
            case 'n': plain = '\n'; break;
            case 'r': plain = '\r'; break;
            case 't': plain = '\t'; break;
            default: break;
            }
            if (plain) {
                buf[0] = plain, w = 1;
                j->pos += 2;
            } else if (e == 'u') {
                unsigned u, lo;
                if (j->pos + 6 > j->n || !hex4(j->s + j->pos + 2, &u))
                    return fail(j, "bad \\u escape");
                j->pos += 6;
                uint32_t cp = u;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low half */
                    if (j->pos + 6 > j->n || j->s[j->pos] != '\\' || j->s[j->pos + 1] != 'u' ||
                        !hex4(j->s + j->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return fail(j, "unpaired surrogate \\u%04X", u);
                    j->pos += 6;
                    cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return fail(j, "unpaired surrogate \\u%04X", u);
                }
                if (cp == 0)
                    return fail(j, "\\u0000 in a string");
                w = put_utf8(buf, cp);
            } else {
                return fail(j, "bad escape '\\%c'", e ? e : '0');
            }
        } else {
            w = utf8_len((const unsigned char *)j->s + j->pos, j->n - j->pos);
            if (!w)
                return fail(j, "invalid UTF-8");
            memcpy(buf, j->s + j->pos, w);
            j->pos += w;
        }
        if (out) {
            if (k + w >= cap)
                return fail(j, "string longer than %zu bytes", cap ? cap - 1 : 0);
            memcpy(out + k, buf, w);
        }
        k += w;
    }
    return fail(j, "unterminated string");
}

int mha_json_string(mha_json *j, char *out, size_t cap, size_t *len)
{
    return scan_string(j, out, cap, len);
}

int mha_json_string_raw_len(mha_json *j, size_t *raw)
{
    size_t at = j->pos;
    ws(j);
    size_t start = j->pos;
    int ok = scan_string(j, NULL, 0, NULL);
    *raw = ok ? j->pos - start - 2 : 0;
    j->pos = at;
    return ok;
}

/* Scans a number by the JSON grammar; *integer: no fraction, no exponent. */
static int scan_number(mha_json *j, int *integer, size_t *start)
{
    ws(j);
    *start = j->pos;
    size_t p = j->pos;
    const char *s = j->s;
    if (p < j->n && s[p] == '-')
        p++;
    if (p >= j->n || !(s[p] >= '0' && s[p] <= '9'))
        return fail(j, "bad number");
    if (s[p] == '0')
        p++;
    else
        while (p < j->n && s[p] >= '0' && s[p] <= '9')
            p++;
    *integer = 1;
    if (p < j->n && s[p] == '.') {
        *integer = 0, p++;
        if (p >= j->n || !(s[p] >= '0' && s[p] <= '9'))
            return j->pos = p, fail(j, "bad number: no digits after '.'");
        while (p < j->n && s[p] >= '0' && s[p] <= '9')
            p++;
    }
    if (p < j->n && (s[p] == 'e' || s[p] == 'E')) {
        *integer = 0, p++;
        if (p < j->n && (s[p] == '+' || s[p] == '-'))
            p++;
        if (p >= j->n || !(s[p] >= '0' && s[p] <= '9'))
            return j->pos = p, fail(j, "bad number: no exponent digits");
        while (p < j->n && s[p] >= '0' && s[p] <= '9')
            p++;
    }
    j->pos = p;
    return 1;
}

int mha_json_u64(mha_json *j, uint64_t *v)
{
    int integer;
    size_t start;
    if (!scan_number(j, &integer, &start))
        return 0;
    if (!integer || j->s[start] == '-')
        return j->pos = start, fail(j, "expected a non-negative integer");
    uint64_t x = 0;
    for (size_t p = start; p < j->pos; p++) {
        unsigned d = (unsigned)(j->s[p] - '0');
        if (x > (uint64_t)(INT64_MAX - d) / 10)
            return j->pos = start, fail(j, "integer too large");
        x = x * 10 + d;
    }
    *v = x;
    return 1;
}

static int skip_depth(mha_json *j, int depth)
{
    if (depth > MHA_JSON_MAX_DEPTH)
        return fail(j, "nested deeper than %d", MHA_JSON_MAX_DEPTH);
    int integer, r;
    size_t start;
    switch (mha_json_peek(j)) {
    case MHA_JSON_OBJECT:
        j->pos++;
        for (int first = 1; (r = mha_json_next(j, first, '}')) == 1; first = 0)
            if (!scan_string(j, NULL, 0, NULL) || !mha_json_expect(j, ':') || !skip_depth(j, depth + 1))
                return 0;
        return r == 0;
    case MHA_JSON_ARRAY:
        j->pos++;
        for (int first = 1; (r = mha_json_next(j, first, ']')) == 1; first = 0)
            if (!skip_depth(j, depth + 1))
                return 0;
        return r == 0;
    case MHA_JSON_STRING:
        return scan_string(j, NULL, 0, NULL);
    case MHA_JSON_NUMBER:
        return scan_number(j, &integer, &start);
    case MHA_JSON_LITERAL:
        for (const char *const *w = (const char *const[]){"true", "false", "null", NULL}; *w; w++)
            if (j->n - j->pos >= strlen(*w) && !memcmp(j->s + j->pos, *w, strlen(*w))) {
                j->pos += strlen(*w);
                return 1;
            }
        return fail(j, "invalid literal");
    case MHA_JSON_END:
        return fail(j, "expected a value, found the end");
    default:
        return fail(j, "unexpected character '%c'", j->s[j->pos]);
    }
}

int mha_json_skip(mha_json *j)
{
    return skip_depth(j, 1);
}

int mha_json_at_end(mha_json *j)
{
    ws(j);
    return j->pos == j->n;
}
