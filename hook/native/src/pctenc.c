/* pctenc.c: percent-encoding of ids and paths in muxd URLs. Only RFC 3986
 * unreserved bytes stay as they are, so the result is safe in a path
 * segment and in a query value alike, and Go's url decoders read it back
 * exactly. */
#include "pctenc.h"

#include <stdbool.h>

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

size_t pct_encode(const char *s, size_t n, char *out)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (unreserved(c)) {
			out[w++] = (char)c;
		} else {
			out[w++] = '%';
			out[w++] = hex[c >> 4];
			out[w++] = hex[c & 15];
		}
	}
	out[w] = '\0';
	return w;
}
