/* duration.c: a port of Go's time.ParseDuration and Duration.String, so
 * that every duration Go accepts in the policy means the same here, and
 * messages print durations the way the Go parts of muxflow do. */
#include "duration.h"

#include <stdbool.h>
#include <string.h>

#define NS_US 1000ULL
#define NS_MS 1000000ULL
#define NS_S 1000000000ULL
#define TOP (1ULL << 63)

static bool digit(char c) { return c >= '0' && c <= '9'; }

static int unit_of(const char *u, size_t n, uint64_t *unit)
{
	static const struct { const char *name; uint64_t ns; } units[] = {
		{"ns", 1}, {"us", NS_US}, {"\xc2\xb5s", NS_US} /* µ, micro sign */,
		{"\xce\xbcs", NS_US} /* μ, Greek mu */, {"ms", NS_MS}, {"s", NS_S},
		{"m", 60 * NS_S}, {"h", 3600 * NS_S},
	};
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (strlen(units[i].name) == n && memcmp(units[i].name, u, n) == 0) {
			*unit = units[i].ns;
			return 0;
		}
	return -1;
}

int parse_duration(const char *s, size_t n, int64_t *out)
{
	size_t i = 0;
	uint64_t d = 0;
	bool neg = false;

	if (n > 0 && (s[0] == '-' || s[0] == '+')) {
		neg = s[0] == '-';
		i++;
	}
	if (n - i == 1 && s[i] == '0') {
		*out = 0;
		return 0;
	}
	if (i == n)
		return -1;
	while (i < n) {
		uint64_t v = 0, f = 0, unit;
		double scale = 1;
		bool pre, post = false, overflow = false;
		size_t start;

		if (!(s[i] == '.' || digit(s[i])))
			return -1;
		start = i;
		for (; i < n && digit(s[i]); i++) {
			if (v > TOP / 10)
				return -1;
			v = v * 10 + (uint64_t)(s[i] - '0');
			if (v > TOP)
				return -1;
		}
		pre = i != start;
		if (i < n && s[i] == '.') {
			i++;
			start = i;
			/* Like Go, digits past what 63 bits hold are consumed but
			 * add no precision. */
			for (; i < n && digit(s[i]); i++) {
				if (overflow)
					continue;
				if (f > (TOP - 1) / 10) {
					overflow = true;
					continue;
				}
				uint64_t y = f * 10 + (uint64_t)(s[i] - '0');
				if (y > TOP) {
					overflow = true;
					continue;
				}
				f = y;
				scale *= 10;
			}
			post = i != start;
		}
		if (!pre && !post)
			return -1;
		start = i;
		while (i < n && s[i] != '.' && !digit(s[i]))
			i++;
		if (i == start || unit_of(s + start, i - start, &unit) != 0)
			return -1;
		if (v > TOP / unit)
			return -1;
		v *= unit;
		if (f > 0) {
			/* Go's float64 step, so fractions of hours round the same. */
			v += (uint64_t)((double)f * ((double)unit / scale));
			if (v > TOP)
				return -1;
		}
		d += v;
		if (d > TOP)
			return -1;
	}
	if (neg) {
		*out = (int64_t)(0 - d);
		return 0;
	}
	if (d > TOP - 1)
		return -1;
	*out = (int64_t)d;
	return 0;
}

/* fmt_frac writes v's last prec digits as a fraction without trailing
 * zeros, right to left ending before buf[w]; returns the new w. */
static size_t fmt_frac(char *buf, size_t w, uint64_t *v, int prec)
{
	bool print = false;
	for (int i = 0; i < prec; i++) {
		unsigned digitv = (unsigned)(*v % 10);
		print = print || digitv != 0;
		if (print)
			buf[--w] = (char)('0' + digitv);
		*v /= 10;
	}
	if (print)
		buf[--w] = '.';
	return w;
}

static size_t fmt_int(char *buf, size_t w, uint64_t v)
{
	if (v == 0)
		buf[--w] = '0';
	while (v > 0) {
		buf[--w] = (char)('0' + v % 10);
		v /= 10;
	}
	return w;
}

void format_duration(int64_t d, char *out)
{
	char buf[32];
	size_t w = sizeof buf;
	uint64_t u = (uint64_t)d;
	bool neg = d < 0;

	if (neg)
		u = 0 - u;
	if (u < NS_S) {
		int prec;
		buf[--w] = 's';
		if (u == 0) {
			buf[--w] = '0';
			goto done;
		} else if (u < NS_US) {
			prec = 0;
			buf[--w] = 'n';
		} else if (u < NS_MS) {
			prec = 3;
			buf[--w] = '\xb5';
			buf[--w] = '\xc2';
		} else {
			prec = 6;
			buf[--w] = 'm';
		}
		w = fmt_frac(buf, w, &u, prec);
		w = fmt_int(buf, w, u);
	} else {
		buf[--w] = 's';
		w = fmt_frac(buf, w, &u, 9);
		w = fmt_int(buf, w, u % 60);
		u /= 60;
		if (u > 0) {
			buf[--w] = 'm';
			w = fmt_int(buf, w, u % 60);
			u /= 60;
			if (u > 0) {
				buf[--w] = 'h';
				w = fmt_int(buf, w, u);
			}
		}
	}
	if (neg)
		buf[--w] = '-';
done:
	memcpy(out, buf + w, sizeof buf - w);
	out[sizeof buf - w] = '\0';
}
