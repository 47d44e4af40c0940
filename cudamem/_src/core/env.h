/* env.h: sizes and counts read from cudamem's environment variables, in
 * one syntax: plain decimal digits, no sign, blanks or base prefix. Which
 * variables there are, and when each is read, is their owners'. */
#ifndef CM_ENV_H
#define CM_ENV_H

#include <stddef.h>

/* s as a size: 0, -1 (empty or not only digits) or -2 (too large for
 * size_t). */
int cm__parse_size(const char *s, size_t *out);

/* The variable `name` as a size, or `fallback` when it is unset or not a
 * size cm__parse_size accepts. */
size_t cm__env_size(const char *name, size_t fallback);

#endif
