/* runlog.c: writes runc-style log lines. containerd reads the last error
 * entry of the runtime's --log file to explain a failed create, so the
 * lines must parse exactly like the ones runc's logrus writes: json lines
 * with sorted keys, or logfmt text lines with Go-quoted values. */
#include "runlog.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char lowerhex[] = "0123456789abcdef";

/* utf8_rune decodes one rune like Go's utf8.DecodeRune: -1 with *size 1
 * for anything invalid (overlong, surrogate, beyond U+10FFFF, cut short). */
static int32_t utf8_rune(const unsigned char *s, size_t n, size_t *size)
{
	unsigned char c = s[0];
	int32_t r;
	size_t need;
	uint32_t lo = 0x80, hi = 0xbf;

	*size = 1;
	if (c < 0x80)
		return c;
	if (c >= 0xc2 && c <= 0xdf) {
		need = 2;
		r = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		need = 3;
		r = c & 0x0f;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		need = 4;
		r = c & 0x07;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else {
		return -1;
	}
	if (n < need)
		return -1;
	for (size_t i = 1; i < need; i++) {
		unsigned char b = s[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf))
			return -1;
		r = (r << 6) | (b & 0x3f);
	}
	*size = need;
	return r;
}

size_t json_escape(const char *str, size_t n, char *out)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t w = 0, i = 0;

	while (i < n) {
		unsigned char b = s[i];
		if (b < 0x80) {
			i++;
			if (b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&') {
				out[w++] = (char)b;
				continue;
			}
			out[w++] = '\\';
			switch (b) {
			case '"': case '\\': out[w++] = (char)b; break;
			case '\b': out[w++] = 'b'; break;
			case '\f': out[w++] = 'f'; break;
			case '\n': out[w++] = 'n'; break;
			case '\r': out[w++] = 'r'; break;
			case '\t': out[w++] = 't'; break;
			default:
				memcpy(out + w, "u00", 3);
				w += 3;
				out[w++] = lowerhex[b >> 4];
				out[w++] = lowerhex[b & 15];
			}
			continue;
		}
		size_t size;
		int32_t r = utf8_rune(s + i, n - i, &size);
		if (r < 0) {
			memcpy(out + w, "\\ufffd", 6);
			w += 6;
		} else if (r == 0x2028 || r == 0x2029) {
			/* Go escapes these so JSON stays valid JavaScript. */
			memcpy(out + w, "\\u202", 5);
			w += 5;
			out[w++] = lowerhex[r & 15];
		} else {
			memcpy(out + w, s + i, size);
			w += size;
		}
		i += size;
	}
	out[w] = '\0';
	return w;
}

/* printable approximates Go's unicode.IsPrint for runes past ASCII: the C1
 * controls and the invisible format characters a log reader would miss
 * are escaped; everything else is written as it is. */
static bool printable(int32_t r)
{
	return !(r < 0xa0 || r == 0xad || r == 0x2028 || r == 0x2029 || r == 0xfeff ||
		 (r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) ||
		 (r >= 0x2060 && r <= 0x2064));
}

size_t text_quote(const char *str, size_t n, char *out)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t w = 0, i = 0;

	out[w++] = '"';
	while (i < n) {
		size_t size;
		int32_t r = utf8_rune(s + i, n - i, &size);
		if (r < 0) {
			out[w++] = '\\';
			out[w++] = 'x';
			out[w++] = lowerhex[s[i] >> 4];
			out[w++] = lowerhex[s[i] & 15];
		} else if (r == '"' || r == '\\') {
			out[w++] = '\\';
			out[w++] = (char)r;
		} else if (r >= 0x20 && r < 0x7f) {
			out[w++] = (char)r;
		} else if (r >= 0x80 && printable(r)) {
			memcpy(out + w, s + i, size);
			w += size;
		} else {
			out[w++] = '\\';
			switch (r) {
			case '\a': out[w++] = 'a'; break;
			case '\b': out[w++] = 'b'; break;
			case '\f': out[w++] = 'f'; break;
			case '\n': out[w++] = 'n'; break;
			case '\r': out[w++] = 'r'; break;
			case '\t': out[w++] = 't'; break;
			case '\v': out[w++] = 'v'; break;
			default:
				if (r < 0x80) {
					out[w++] = 'x';
				} else {
					out[w++] = 'u';
					out[w++] = lowerhex[(r >> 12) & 15];
					out[w++] = lowerhex[(r >> 8) & 15];
				}
				out[w++] = lowerhex[(r >> 4) & 15];
				out[w++] = lowerhex[r & 15];
			}
		}
		i += size;
	}
	out[w++] = '"';
	out[w] = '\0';
	return w;
}

static size_t put_num(char *out, unsigned v, int digits)
{
	for (int i = digits - 1; i >= 0; i--, v /= 10)
		out[i] = (char)('0' + v % 10);
	return (size_t)digits;
}

size_t rfc3339nano(const struct timespec *ts, char *out)
{
	struct tm tm;
	size_t w = 0;
	time_t sec = ts->tv_sec;

	gmtime_r(&sec, &tm);
	w += put_num(out + w, (unsigned)(tm.tm_year + 1900) % 10000, 4);
	out[w++] = '-';
	w += put_num(out + w, (unsigned)tm.tm_mon + 1, 2);
	out[w++] = '-';
	w += put_num(out + w, (unsigned)tm.tm_mday, 2);
	out[w++] = 'T';
	w += put_num(out + w, (unsigned)tm.tm_hour, 2);
	out[w++] = ':';
	w += put_num(out + w, (unsigned)tm.tm_min, 2);
	out[w++] = ':';
	w += put_num(out + w, (unsigned)tm.tm_sec, 2);
	if (ts->tv_nsec > 0) {
		/* Go's .999999999: trailing zeros dropped, none at all for 0. */
		char frac[9];
		int digits = 9;
		put_num(frac, (unsigned)ts->tv_nsec, 9);
		while (digits > 0 && frac[digits - 1] == '0')
			digits--;
		out[w++] = '.';
		memcpy(out + w, frac, (size_t)digits);
		w += (size_t)digits;
	}
	out[w++] = 'Z';
	out[w] = '\0';
	return w;
}

static size_t put(char *out, const char *s)
{
	size_t n = strlen(s);
	memcpy(out, s, n);
	return n;
}

char *runlog_line(const char *format, const char *level, const char *msg,
		  const char *id, const struct timespec *now, size_t *len)
{
	size_t mlen = strlen(msg), ilen = id ? strlen(id) : 0, llen = strlen(level);
	size_t cap = 10 * (mlen + ilen + llen) + 160;
	char *out = malloc(cap);
	char stamp[40];
	size_t w = 0;

	if (!out)
		return NULL;
	rfc3339nano(now, stamp);
	if (strcmp(format, "json") == 0) {
		/* Keys in encoding/json's map order: sorted. */
		out[w++] = '{';
		if (id) {
			w += put(out + w, "\"container\":\"");
			w += json_escape(id, ilen, out + w);
			w += put(out + w, "\",");
		}
		w += put(out + w, "\"level\":\"");
		w += json_escape(level, llen, out + w);
		w += put(out + w, "\",\"msg\":\"");
		w += json_escape(msg, mlen, out + w);
		w += put(out + w, "\",\"time\":\"");
		w += put(out + w, stamp);
		w += put(out + w, "\"}\n");
	} else {
		w += put(out + w, "time=\"");
		w += put(out + w, stamp);
		w += put(out + w, "\" level=");
		w += put(out + w, level);
		w += put(out + w, " msg=");
		w += text_quote(msg, mlen, out + w);
		if (id) {
			w += put(out + w, " container=");
			w += text_quote(id, ilen, out + w);
		}
		out[w++] = '\n';
	}
	out[w] = '\0';
	*len = w;
	return out;
}

void runlog_append(const char *path, const char *format, const char *level,
		   const char *msg, const char *id)
{
	struct timespec now;
	size_t len;
	char *line;
	int fd;

	clock_gettime(CLOCK_REALTIME, &now);
	line = runlog_line(format, level, msg, id, &now, &len);
	if (!line)
		return;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd >= 0) {
		/* One write: with O_APPEND the line cannot interleave with
		 * another writer's. */
		ssize_t r = write(fd, line, len);
		(void)r;
		close(fd);
	}
	free(line);
}
