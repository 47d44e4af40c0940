/* env.c: the one parser of env.h's sizes; the variables are its callers'
 * (pending.c's limits, hostpool.c's and staging.c's tunables). */
#include "env.h"

#include <stdint.h>
#include <stdlib.h>

int
cm__parse_size(const char *s, size_t *out)
{
    size_t value = 0;

    if (*s == '\0') {
        return -1;
    }
    for (; *s != '\0'; s++) {
        size_t digit;

        if (*s < '0' || *s > '9') {
            return -1;
        }
        digit = (size_t)(*s - '0');
        if (value > (SIZE_MAX - digit) / 10) {
            return -2;
        }
        value = value * 10 + digit;
    }
    *out = value;
    return 0;
}

size_t
cm__env_size(const char *name, size_t fallback)
{
    const char *s = getenv(name);
    size_t value;

    return s != NULL && cm__parse_size(s, &value) == 0 ? value : fallback;
}
