/* duration.h: Go time.Duration strings ("2s", "1.5s", "1m30s"), the
 * notation of the policy's hook.timeout and of muxflow-hook's --timeout. */
#ifndef MUXFLOW_DURATION_H
#define MUXFLOW_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* parse_duration is time.ParseDuration over s[0..n): 0 and *ns set, or -1. */
int parse_duration(const char *s, size_t n, int64_t *ns);

/* format_duration is time.Duration.String; out must hold 33 bytes. */
void format_duration(int64_t ns, char *out);

#endif
