/* policyscan.c: finds [hook] runtime, [hook] timeout and [node] socket in
 * the TOML policy without a TOML decoder, for the runtime's fast path.
 *
 * It only understands the way the shipped policy and every hand-written
 * one says these: `key = "value"` (or '...') on one line inside a plain
 * [hook] or [node] header. Whatever could possibly mean one of these keys
 * in another way (dotted or quoted keys, quoted headers, inline tables,
 * arrays of tables, escapes, repeats), and whatever could hide a line from
 * a line-by-line reading (multi-line strings, unbalanced brackets), makes
 * it answer "unsure": the Go wrapper then decodes the policy properly.
 * It errs only ever towards "unsure". */
#include "policyscan.h"

#include "args.h"
#include "duration.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum table { T_ROOT, T_HOOK, T_NODE, T_OTHER };

/* Deep enough for any sane policy; a deeper one is not worth reading. */
#define MAX_DEPTH 64

struct span {
	const char *p;
	size_t n;
};

void policy_defaults(struct policy *p)
{
	p->runtime = POLICY_DEFAULT_RUNTIME;
	p->socket = POLICY_DEFAULT_SOCKET;
	p->timeout = POLICY_DEFAULT_TIMEOUT;
	p->timeout_ns = 2000000000LL;
	p->used = 0;
}

static struct span trim(struct span s)
{
	while (s.n > 0 && (s.p[0] == ' ' || s.p[0] == '\t'))
		s.p++, s.n--;
	while (s.n > 0 && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t'))
		s.n--;
	return s;
}

static bool span_is(struct span s, const char *w)
{
	return s.n == strlen(w) && memcmp(s.p, w, s.n) == 0;
}

static bool span_has(struct span s, const char *w)
{
	return memmem(s.p, s.n, w, strlen(w)) != NULL;
}

static bool span_has_quote(struct span s)
{
	return memchr(s.p, '"', s.n) || memchr(s.p, '\'', s.n);
}

/* track follows strings, comments and brackets through one line, so that a
 * value spanning lines (an array, say) is skipped as a whole and a '#' or
 * '[' inside a string is not taken for what it looks like. */
static int track(struct span s, int *depth)
{
	for (size_t i = 0; i < s.n; i++) {
		char c = s.p[i];
		if (c == '#')
			return 0;
		if (c == '"' || c == '\'') {
			if (i + 2 < s.n && s.p[i + 1] == c && s.p[i + 2] == c)
				return -1; /* multi-line string: its lines would look like TOML */
			size_t j = i + 1;
			for (; j < s.n && s.p[j] != c; j++)
				if (c == '"' && s.p[j] == '\\')
					j++;
			if (j >= s.n)
				return -1;
			i = j;
		} else if (c == '[' || c == '{') {
			if (++*depth > MAX_DEPTH)
				return -1;
		} else if (c == ']' || c == '}') {
			if (--*depth < 0)
				return -1;
		}
	}
	return 0;
}

/* quoted_value reads a basic string without escapes or a literal string,
 * followed by nothing but an optional comment; empty is refused. */
static int quoted_value(struct span s, struct span *v)
{
	s = trim(s);
	if (s.n < 2 || (s.p[0] != '"' && s.p[0] != '\''))
		return -1;
	char q = s.p[0];
	if (s.n >= 3 && s.p[1] == q && s.p[2] == q)
		return -1;
	const char *end = memchr(s.p + 1, q, s.n - 1);
	if (!end)
		return -1;
	v->p = s.p + 1;
	v->n = (size_t)(end - v->p);
	if (q == '"' && memchr(v->p, '\\', v->n))
		return -1;
	struct span rest = {end + 1, s.n - (size_t)(end + 1 - s.p)};
	rest = trim(rest);
	if (rest.n > 0 && rest.p[0] != '#')
		return -1;
	return v->n > 0 ? 0 : -1;
}

/* keep copies v into the policy's store, NUL-terminated; each key is read
 * once, so the store holds the longest values allowed. */
static int keep(struct policy *p, struct span v, size_t max, const char **out)
{
	if (v.n >= max || p->used + v.n + 1 > sizeof p->store)
		return -1;
	char *s = p->store + p->used;
	memcpy(s, v.p, v.n);
	s[v.n] = '\0';
	p->used += v.n + 1;
	*out = s;
	return 0;
}

static int set_timeout(struct span v, struct policy *p)
{
	int64_t ns;
	/* The policy decoder trims before parsing. */
	struct span t = trim(v);
	if (keep(p, v, POLICY_MAX_TIMEOUT_TEXT, &p->timeout) != 0)
		return -1;
	if (parse_duration(t.p, t.n, &ns) != 0 || ns <= 0 || ns > POLICY_MAX_TIMEOUT_NS)
		return -1;
	p->timeout_ns = ns;
	return 0;
}

static int set_socket(struct span v, struct policy *p)
{
	if (v.n == 0 || v.n >= PATH_MAX || v.p[0] != '/')
		return -1;
	char clean[v.n + 2];
	if (keep(p, v, PATH_MAX, &p->socket) != 0)
		return -1;
	path_clean(p->socket, clean);
	return strcmp(clean, p->socket) == 0 ? 0 : -1;
}

/* bad_bytes refuses control characters: TOML allows only tab, and a stray
 * one could make a line mean something else to the real decoder. */
static bool bad_bytes(struct span line)
{
	for (size_t i = 0; i < line.n; i++) {
		unsigned char c = (unsigned char)line.p[i];
		if ((c < 0x20 && c != '\t' && !(c == '\r' && i == line.n - 1)) || c == 0x7f)
			return true;
	}
	return false;
}

int policy_scan(const char *doc, size_t len, struct policy *p)
{
	enum table table = T_ROOT;
	int depth = 0;
	bool seen_runtime = false, seen_timeout = false, seen_socket = false;
	size_t off = 0;

	policy_defaults(p);
	if (len >= 3 && memcmp(doc, "\xef\xbb\xbf", 3) == 0)
		return -1; /* a byte-order mark would hide the first line's meaning */
	while (off < len) {
		const char *nl = memchr(doc + off, '\n', len - off);
		struct span line = {doc + off, nl ? (size_t)(nl - (doc + off)) : len - off};
		off += line.n + 1;
		if (bad_bytes(line))
			return -1;
		if (line.n > 0 && line.p[line.n - 1] == '\r')
			line.n--;
		if (depth > 0) {
			if (track(line, &depth) != 0)
				return -1;
			continue;
		}
		struct span t = trim(line);
		if (t.n == 0 || t.p[0] == '#')
			continue;
		if (t.p[0] == '[') {
			if (t.n > 1 && t.p[1] == '[')
				return -1; /* arrays of tables */
			const char *end = memchr(t.p, ']', t.n);
			if (!end)
				return -1;
			struct span name = trim((struct span){t.p + 1, (size_t)(end - t.p - 1)});
			struct span rest = trim((struct span){end + 1, t.n - (size_t)(end + 1 - t.p)});
			if (rest.n > 0 && rest.p[0] != '#')
				return -1;
			if (span_has_quote(name) &&
			    (span_has(name, "hook") || span_has(name, "node") || memchr(name.p, '\\', name.n)))
				return -1; /* a quoted header that might be [hook] or [node] */
			table = span_is(name, "hook") ? T_HOOK : span_is(name, "node") ? T_NODE : T_OTHER;
			continue;
		}
		if (track(t, &depth) != 0)
			return -1;
		const char *eq = memchr(t.p, '=', t.n);
		if (!eq)
			return -1;
		struct span key = trim((struct span){t.p, (size_t)(eq - t.p)});
		struct span val = {eq + 1, t.n - (size_t)(eq + 1 - t.p)};
		struct span v;
		if (table == T_OTHER)
			continue;
		if (span_has_quote(key))
			return -1; /* a quoted key can spell anything, escapes included */
		switch (table) {
		case T_ROOT:
			if (span_has(key, "hook") || span_has(key, "node"))
				return -1; /* a dotted key or an inline table for [hook] or [node] */
			break;
		case T_HOOK:
			if (span_is(key, "runtime")) {
				if (seen_runtime || quoted_value(val, &v) != 0 ||
				    keep(p, v, PATH_MAX, &p->runtime) != 0)
					return -1;
				seen_runtime = true;
			} else if (span_is(key, "timeout")) {
				if (seen_timeout || quoted_value(val, &v) != 0 || set_timeout(v, p) != 0)
					return -1;
				seen_timeout = true;
			} else if (span_has(key, "runtime") || span_has(key, "timeout")) {
				return -1; /* dotted: let the real decoder decide */
			}
			break;
		case T_NODE:
			if (span_is(key, "socket")) {
				if (seen_socket || quoted_value(val, &v) != 0 || set_socket(v, p) != 0)
					return -1;
				seen_socket = true;
			} else if (span_has(key, "socket")) {
				return -1;
			}
			break;
		case T_OTHER:
			break;
		}
	}
	return depth == 0 ? 0 : -1;
}

/* The file is read into static storage: untouched pages cost nothing, and
 * the fast path stays free of allocation. */
static char policy_buf[POLICY_MAX_SIZE + 1];

int policy_load(const char *env, struct policy *p)
{
	const char *path = env && env[0] ? env : POLICY_DEFAULT_PATH;
	struct stat st;
	size_t got = 0;
	int fd;

	policy_defaults(p);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT && !(env && env[0]) ? 0 : -1;
	/* Only a regular file: a FIFO or device could block or never end. */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > POLICY_MAX_SIZE) {
		close(fd);
		return -1;
	}
	for (;;) {
		ssize_t r = read(fd, policy_buf + got, sizeof policy_buf - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			close(fd);
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
		if (got > POLICY_MAX_SIZE) {
			close(fd);
			return -1;
		}
	}
	close(fd);
	return policy_scan(policy_buf, got, p);
}
