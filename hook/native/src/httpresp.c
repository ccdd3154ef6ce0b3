/* httpresp.c: a strict reader for the one kind of response muxd sends on
 * the creation path: a status line, headers, and a body framed by
 * Content-Length, the whole read to the end of the connection. Anything
 * else is refused as malformed rather than guessed at, since a half-read
 * body would become the container's config.json. */
#include "httpresp.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Bounds the size a response may announce; the caller bounds what it
 * reads to the same figure. */
#define MAX_BODY (32u << 20)
#define MAX_HEADERS 100

static bool is_token_char(unsigned char c)
{
	return c > 0x20 && c < 0x7f && !strchr("()<>@,;:\\\"/[]?={}", c);
}

/* next_line returns the length of the line starting at off (without
 * CR LF or LF) and sets *next past it; -1 when no line end remains. */
static long next_line(const char *buf, size_t len, size_t off, size_t *next)
{
	const char *nl = memchr(buf + off, '\n', len - off);
	size_t n;
	if (!nl)
		return -1;
	n = (size_t)(nl - (buf + off));
	*next = off + n + 1;
	if (n > 0 && buf[off + n - 1] == '\r')
		n--;
	return (long)n;
}

static void quote_prefix(const char *s, size_t n, char *out, size_t outlen)
{
	size_t w = 0;
	for (size_t i = 0; i < n && i < 40 && w + 5 < outlen; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c < 0x7f && c != '"')
			out[w++] = (char)c;
		else
			w += (size_t)snprintf(out + w, outlen - w, "\\x%02x", c);
	}
	if (n > 40 && w + 4 < outlen)
		w += (size_t)snprintf(out + w, outlen - w, "...");
	out[w < outlen ? w : outlen - 1] = '\0';
}

static int fail(char *err, size_t errlen, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return -1;
}

int http_parse_response(const char *buf, size_t len, struct http_response *r,
			char *err, size_t errlen)
{
	size_t off = 0, next;
	long n;
	long long clen = -1;
	int headers = 0;
	char shown[200];

	r->status = 0;
	r->body = NULL;
	r->body_len = 0;
	if (len == 0)
		return fail(err, errlen, "it was empty");
	n = next_line(buf, len, 0, &next);
	if (n < 0)
		return fail(err, errlen, "it ended inside the status line");
	/* HTTP/1.x NNN[ reason] */
	{
		const char *s = buf;
		bool ok = n >= 12 && memcmp(s, "HTTP/1.", 7) == 0 && s[7] >= '0' && s[7] <= '9' &&
			  s[8] == ' ' && s[9] >= '1' && s[9] <= '9' && s[10] >= '0' && s[10] <= '9' &&
			  s[11] >= '0' && s[11] <= '9' && (n == 12 || s[12] == ' ');
		if (!ok) {
			quote_prefix(s, (size_t)n, shown, sizeof shown);
			snprintf(err, errlen, "bad status line \"%s\"", shown);
			return -1;
		}
		r->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
		if (r->status < 200)
			return fail(err, errlen, "an informational status instead of an answer");
	}
	off = next;
	for (;;) {
		n = next_line(buf, len, off, &next);
		if (n < 0)
			return fail(err, errlen, "it ended inside the headers");
		const char *h = buf + off;
		off = next;
		if (n == 0)
			break;
		if (++headers > MAX_HEADERS)
			return fail(err, errlen, "more than 100 header lines");
		const char *colon = memchr(h, ':', (size_t)n);
		if (!colon || colon == h)
			goto badheader;
		for (const char *p = h; p < colon; p++)
			if (!is_token_char((unsigned char)*p))
				goto badheader;
		size_t nlen = (size_t)(colon - h);
		const char *v = colon + 1, *vend = h + n;
		while (v < vend && (*v == ' ' || *v == '\t'))
			v++;
		while (vend > v && (vend[-1] == ' ' || vend[-1] == '\t'))
			vend--;
		if (nlen == 17 && strncasecmp(h, "transfer-encoding", 17) == 0)
			return fail(err, errlen, "it used Transfer-Encoding, which muxd never sends here");
		if (nlen == 14 && strncasecmp(h, "content-length", 14) == 0) {
			long long val = 0;
			if (v == vend)
				goto badlength;
			for (const char *p = v; p < vend; p++) {
				if (*p < '0' || *p > '9')
					goto badlength;
				val = val * 10 + (*p - '0');
				if (val > (long long)MAX_BODY)
					return fail(err, errlen, "its Content-Length is over 32 MiB");
			}
			if (clen >= 0 && clen != val)
				return fail(err, errlen, "two different Content-Length headers");
			clen = val;
		}
		continue;
badheader:
		quote_prefix(h, (size_t)n, shown, sizeof shown);
		snprintf(err, errlen, "bad header line \"%s\"", shown);
		return -1;
badlength:
		quote_prefix(v, (size_t)(vend - v), shown, sizeof shown);
		snprintf(err, errlen, "bad Content-Length \"%s\"", shown);
		return -1;
	}
	size_t rest = len - off;
	if (clen < 0 && rest > 0)
		return fail(err, errlen, "a body without Content-Length");
	if (clen >= 0 && rest < (size_t)clen) {
		snprintf(err, errlen, "it was cut short: %zu of %lld body bytes", rest, clen);
		return -1;
	}
	if (clen >= 0 && rest > (size_t)clen) {
		snprintf(err, errlen, "%zu bytes followed the %lld-byte body", rest - (size_t)clen, clen);
		return -1;
	}
	if ((r->status == 204 || r->status == 304) && rest > 0)
		return fail(err, errlen, "a body with a no-content status");
	r->body = buf + off;
	r->body_len = rest;
	return 0;
}
