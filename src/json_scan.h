/* json_scan.h — a strict, allocation-free JSON scanner (RFC 8259) for the safetensors header:
 * the caller walks the text with these calls instead of building a tree, so the only memory
 * the header costs is what the caller keeps. Strings are decoded (escapes, \u surrogate pairs
 * to UTF-8) and raw UTF-8 is validated; nesting is capped; every failure leaves a message
 * naming the byte offset. */
#ifndef MHA_JSON_SCAN_H
#define MHA_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define MHA_JSON_MAX_DEPTH 64

typedef struct mha_json {
    const char *s;
    size_t n, pos;
    char msg[128]; /* why the last call failed */
} mha_json;

typedef enum { MHA_JSON_OBJECT, MHA_JSON_ARRAY, MHA_JSON_STRING, MHA_JSON_NUMBER, MHA_JSON_LITERAL, MHA_JSON_END,
               MHA_JSON_BAD } mha_json_kind;

void mha_json_init(mha_json *j, const char *text, size_t n);
/* The kind of the next value, after skipping whitespace (MHA_JSON_END at the end of the text). */
mha_json_kind mha_json_peek(mha_json *j);
/* Consumes c after whitespace; 0 (with a message) if the next character is another. */
int mha_json_expect(mha_json *j, char c);
/* After '{' or a member: 1 if another member follows (consuming ',' when not first), 0 at
 * '}' (consumed), -1 on a syntax error. Same for arrays with ']'. */
int mha_json_next(mha_json *j, int first, char close);
/* A string, decoded into out (NUL-terminated; *len without the NUL). out needs at most the
 * raw length + 1 bytes: mha_json_string_raw_len tells it. Strings holding \u0000 are refused
 * (names are C strings). 0 on failure. */
int mha_json_string(mha_json *j, char *out, size_t cap, size_t *len);
/* *raw: the byte length of the string at the cursor as written (quotes excluded), which
 * bounds its decoded length. The cursor does not move. 0 (with a message) if no valid
 * string is there. */
int mha_json_string_raw_len(mha_json *j, size_t *raw);
/* A non-negative integer ≤ INT64_MAX written without fraction or exponent. 0 on failure. */
int mha_json_u64(mha_json *j, uint64_t *v);
/* Skips any value (depth-limited). 0 on failure. */
int mha_json_skip(mha_json *j);
/* 1 if only whitespace is left. */
int mha_json_at_end(mha_json *j);

#endif
