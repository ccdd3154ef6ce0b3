/* pctenc.h: percent-encoding of values put into muxd request URLs. */
#ifndef MUXFLOW_PCTENC_H
#define MUXFLOW_PCTENC_H

#include <stddef.h>

/* pct_encode writes s[0..n) with every byte but ALPHA DIGIT - . _ ~ as %XX
 * (upper case) and a final NUL; out must hold 3n+1 bytes. Returns the
 * encoded length. */
size_t pct_encode(const char *s, size_t n, char *out);

#endif
