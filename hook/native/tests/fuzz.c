/* fuzz.c: a deterministic mutation fuzz loop over every parser of
 * hook/native. Inputs are mutated from seed corpora with a fixed seed, so
 * a failure repeats exactly; each is checked for the properties the
 * programs rely on, not only for crashes (the test build runs this under
 * AddressSanitizer and UBSan).
 * usage: fuzz DEFAULT_POLICY_TOML PLAIN_SPEC_JSON TESTDATA_DIR (FUZZ_ITERS overrides
 * the iterations per parser, FUZZ_SEED the seed) */
#include "args.h"
#include "check.h"
#include "duration.h"
#include "httpresp.h"
#include "pctenc.h"
#include "policyscan.h"
#include "runlog.h"
#include "specscan.h"
#include "vec.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

int check_failures;
static uint64_t rng;
static long iters = 200000;
/* Inputs a parser accepted: the properties are checked on these. */
static long accepted;

static uint64_t next(void)
{
	/* splitmix64 */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

/* Stop a loop after a few failures: one input is enough to debug. */
#define ENOUGH() (check_failures > 20)
/* Failures before the current input, to dump only the inputs that fail. */
static int seen;
#define FAILED_NOW() (check_failures > seen ? (seen = check_failures, 1) : 0)

static void dump(const char *what, const char *buf, size_t len)
{
	fprintf(stderr, "  %s (%zu bytes): \"", what, len);
	for (size_t i = 0; i < len && i < 400; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			fputc(c, stderr);
		else
			fprintf(stderr, "\\x%02x", c);
	}
	fprintf(stderr, "%s\"\n", len > 400 ? "..." : "");
}

/* mutate changes buf[0..len) in place (capacity cap) a few times, with
 * bytes and tokens that matter to the format under test. */
static size_t mutate(char *buf, size_t len, size_t cap, const char *const *dict, size_t ndict)
{
	static const char interesting[] = "\n\r\"'[]{}=#\\ \t.:/0123456789-%\x00\xff\xc2\xb5";
	int n = 1 + (int)below(6);
	for (int k = 0; k < n; k++) {
		size_t pos = below(len + 1);
		switch (below(8)) {
		case 0: /* flip a bit */
			if (len)
				buf[below(len)] ^= (char)(1u << below(8));
			break;
		case 1: /* overwrite with an interesting byte */
			if (len)
				buf[below(len)] = interesting[below(sizeof interesting - 1)];
			break;
		case 2: { /* delete a range */
			size_t d = 1 + below(len < 16 ? len + 1 : 16);
			if (pos + d > len)
				d = len - pos;
			memmove(buf + pos, buf + pos + d, len - pos - d);
			len -= d;
			break;
		}
		case 3:
		case 4: { /* insert a token */
			const char *t = dict[below(ndict)];
			size_t tl = strlen(t);
			if (len + tl > cap)
				break;
			memmove(buf + pos + tl, buf + pos, len - pos);
			memcpy(buf + pos, t, tl);
			len += tl;
			break;
		}
		case 5: { /* duplicate a chunk elsewhere */
			size_t from = below(len + 1), cl = below(32);
			if (from + cl > len)
				cl = len - from;
			if (len + cl > cap)
				break;
			char chunk[32];
			memcpy(chunk, buf + from, cl);
			memmove(buf + pos + cl, buf + pos, len - pos);
			memcpy(buf + pos, chunk, cl);
			len += cl;
			break;
		}
		case 6: /* insert a random byte */
			if (len + 1 > cap)
				break;
			memmove(buf + pos + 1, buf + pos, len - pos);
			buf[pos] = (char)next();
			len++;
			break;
		case 7: /* truncate */
			if (below(4) == 0)
				len = pos;
			break;
		}
	}
	return len;
}

/* ---- policy scan ---- */

static bool same_policy(const struct policy *a, const struct policy *b)
{
	return strcmp(a->runtime, b->runtime) == 0 && strcmp(a->socket, b->socket) == 0 &&
	       strcmp(a->timeout, b->timeout) == 0 && a->timeout_ns == b->timeout_ns;
}

static void fuzz_policy(const char *default_doc, size_t default_len)
{
	static const char *const seeds[] = {
		"", "[hook]\nruntime = \"crun\"\n", "[node]\nsocket = \"/run/m.sock\"\n[hook]\ntimeout = '3s'\n",
		"[mps]\nx = [\n  \"[hook]\",\n]\n[hook]\nruntime = 'r' # c\n", "hook.runtime = \"x\"\n",
		"[hook]\nlist = [\n\"runtime = 'x'\"\n]\nruntime = \"a\"\n", "[node]\r\nsocket = '/s'\r\n",
	};
	static const char *const dict[] = {
		"[hook]", "[node]", "[[hook]]", "[\"hook\"]", "runtime", "socket", "timeout", " = ", "\"", "'",
		"\"\"\"", "'''", "\n", "\r\n", "#", "hook.", "node.", "{", "}", "[", "]", "\\", "\\u0068",
		"\"/run/x.sock\"", "\"2s\"", "\"crun\"", "'1m'", "\"500ms\"", "\n[hook]\nruntime = \"z\"\n",
		"\nnode = {socket=\"/a\"}\n", "\xef\xbb\xbf", ",", "\t",
	};
	size_t cap = default_len * 2 + 4096;
	char *buf = malloc(cap), *alt = malloc(2 * cap + 64);
	struct policy p, q;

	for (long it = 0; it < iters && !ENOUGH(); it++) {
		const char *seed;
		size_t len;
		if (below(8) == 0) {
			seed = default_doc;
			len = default_len;
		} else {
			seed = seeds[below(sizeof seeds / sizeof seeds[0])];
			len = strlen(seed);
		}
		memcpy(buf, seed, len);
		len = mutate(buf, len, cap, dict, sizeof dict / sizeof dict[0]);
		if (policy_scan(buf, len, &p) != 0)
			continue;
		accepted++;

		/* What a sure answer promises. */
		char clean[PATH_MAX + 2];
		path_clean(p.socket, clean);
		bool rt_ok = p.runtime[0] != '\0';
		for (const char *c = p.runtime; *c; c++)
			rt_ok = rt_ok && ((unsigned char)*c >= 0x20 || *c == '\t') && *c != 0x7f;
		int64_t ns = 0;
		const char *t = p.timeout;
		size_t tl = strlen(t);
		while (tl && (*t == ' ' || *t == '\t'))
			t++, tl--;
		while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t'))
			tl--;
		CHECK(rt_ok, "runtime \"%s\" is empty or has control characters", p.runtime);
		CHECK(p.socket[0] == '/' && strcmp(clean, p.socket) == 0, "socket \"%s\" not clean and absolute", p.socket);
		CHECK(p.timeout_ns > 0 && p.timeout_ns <= POLICY_MAX_TIMEOUT_NS && parse_duration(t, tl, &ns) == 0 &&
		      ns == p.timeout_ns, "timeout \"%s\" = %" PRId64, p.timeout, p.timeout_ns);
		/* A value other than the default was read from the document,
		 * quoted. */
		if (strcmp(p.runtime, POLICY_DEFAULT_RUNTIME) != 0) {
			size_t n = strlen(p.runtime);
			bool found = false;
			for (const char *s = buf; (s = memmem(s, len - (size_t)(s - buf), p.runtime, n)); s++)
				if (s > buf && (s[-1] == '"' || s[-1] == '\'') && (size_t)(s - buf) + n < len &&
				    s[n] == s[-1]) {
					found = true;
					break;
				}
			CHECK(found, "runtime \"%s\" is not a quoted string of the document", p.runtime);
		}
		/* A table added at the end cannot change anything. */
		memcpy(alt, buf, len);
		memcpy(alt + len, "\n[zz_fuzz]\nq = 1\n", 17);
		CHECK(policy_scan(alt, len + 17, &q) == 0 && same_policy(&p, &q), "an added table changed the answer");
		/* Nor can a comment line at the start. */
		memcpy(alt, "# [hook]\n", 9);
		memcpy(alt + 9, buf, len);
		CHECK(policy_scan(alt, len + 9, &q) == 0 && same_policy(&p, &q), "a leading comment changed the answer");
		/* CR LF line ends read like LF ones. */
		if (!memchr(buf, '\r', len)) {
			size_t w = 0;
			for (size_t i = 0; i < len; i++) {
				if (buf[i] == '\n')
					alt[w++] = '\r';
				alt[w++] = buf[i];
			}
			CHECK(policy_scan(alt, w, &q) == 0 && same_policy(&p, &q), "CR LF changed the answer");
		}
		/* The same document under a top-level dotted key is unsure. */
		memcpy(alt, "hook.runtime = \"zz\"\n", 20);
		memcpy(alt + 20, buf, len);
		CHECK(policy_scan(alt, len + 20, &q) != 0, "a dotted hook.runtime went unnoticed");
		if (FAILED_NOW())
			dump("policy", buf, len);
	}
	free(buf);
	free(alt);
}

/* ---- HTTP responses ---- */

static void fuzz_http(void)
{
	static const char *const seeds[] = {
		"HTTP/1.1 204 No Content\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"ociVersion\"}",
		"HTTP/1.1 409 Conflict\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 12\r\n\r\nno GPU left\n",
		"HTTP/1.0 500 Internal Server Error\nContent-Length: 0\n\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	};
	static const char *const dict[] = {
		"\r\n", "\n", "\r\n\r\n", "Content-Length: ", "content-length:", "Transfer-Encoding: chunked\r\n",
		"0", "1", "12", "99999999999", "HTTP/1.1 ", "200", "204", "100", ":", " ", "X-A: b\r\n", "\t",
	};
	char buf[1024], alt[1200];
	struct http_response r, q;
	char err[256];

	for (long it = 0; it < iters && !ENOUGH(); it++) {
		const char *seed = seeds[below(sizeof seeds / sizeof seeds[0])];
		size_t len = strlen(seed);
		memcpy(buf, seed, len);
		len = mutate(buf, len, sizeof buf, dict, sizeof dict / sizeof dict[0]);
		/* The parser reads exactly len bytes: give ASan a tight copy. */
		char *exact = malloc(len ? len : 1);
		memcpy(exact, buf, len);
		int rc = http_parse_response(exact, len, &r, err, sizeof err);
		if (rc != 0) {
			CHECK(err[0] != '\0', "a failure without a reason");
			free(exact);
			continue;
		}
		accepted++;
		CHECK(r.status >= 200 && r.status <= 999, "status %d", r.status);
		CHECK(r.body >= exact && r.body + r.body_len == exact + len, "the body is not the tail of the input");
		/* Every strict prefix is refused: a cut answer is never taken
		 * for a whole one. */
		size_t cut = below(len);
		CHECK(http_parse_response(exact, cut, &q, err, sizeof err) != 0, "a prefix of %zu bytes parsed", cut);
		CHECK(http_parse_response(exact, len - 1, &q, err, sizeof err) != 0, "the answer less one byte parsed");
		/* And so is the answer with one byte more. */
		memcpy(alt, exact, len);
		alt[len] = (char)next();
		CHECK(http_parse_response(alt, len + 1, &q, err, sizeof err) != 0, "the answer plus one byte parsed");
		/* The same status and body in canonical form parse the same. */
		int n = snprintf(alt, sizeof alt, "HTTP/1.1 %03d X\r\nContent-Length: %zu\r\n\r\n", r.status, r.body_len);
		if ((size_t)n + r.body_len <= sizeof alt) {
			memcpy(alt + n, r.body, r.body_len);
			CHECK(http_parse_response(alt, (size_t)n + r.body_len, &q, err, sizeof err) == 0 &&
			      q.status == r.status && q.body_len == r.body_len && memcmp(q.body, r.body, r.body_len) == 0,
			      "canonical form differs: %s", err);
		}
		if (FAILED_NOW())
			dump("response", exact, len);
		free(exact);
	}
}

/* ---- runtime command lines ---- */

static void fuzz_args(void)
{
	static const char *const words[] = {
		"create", "run", "delete", "state", "kill", "--", "-", "--log", "--log=/l", "--log-format", "json",
		"--root", "/r", "--bundle", "-b", "--bundle=rel", "-b=/abs/./x/../y", "--pid-file", "--config", "-f",
		"--detach", "c1", "my c2", "..", ".", "/", "", "-=", "--=", "---bundle", "--preserve-fds", "3",
		"--console-socket", "--criu", "--rootless", "--cgroup-manager", "--systemd-cgroup", "a/b/../c",
	};
	const char *argv[12];
	struct invocation inv;
	char err[256];

	for (long it = 0; it < iters && !ENOUGH(); it++) {
		int argc = (int)below(12);
		for (int i = 0; i < argc; i++)
			argv[i] = words[below(sizeof words / sizeof words[0])];
		const char *cwd = below(4) ? "/cwd/x" : "/";
		int rc = parse_args(argc, (char *const *)argv, cwd, &inv, err, sizeof err);
		bool create = strcmp(inv.command, "create") == 0 || strcmp(inv.command, "run") == 0;
		if (rc != 0) {
			CHECK(strstr(err, "needs a value") || (create && strstr(err, "exactly one container id")),
			      "unexpected error %s", err);
			continue;
		}
		accepted++;
		if (!create) {
			CHECK(inv.id[0] == '\0' && inv.bundle[0] == '\0', "an id or bundle outside create/run");
			continue;
		}
		char clean[2 * PATH_MAX];
		path_clean(inv.bundle, clean);
		CHECK(inv.bundle[0] == '/' && strcmp(clean, inv.bundle) == 0, "bundle %s", inv.bundle);
		bool from_args = false;
		for (int i = 0; i < argc; i++)
			from_args = from_args || argv[i] == inv.id;
		CHECK(from_args, "the id is not one of the arguments");
		if (FAILED_NOW()) {
			for (int i = 0; i < argc; i++)
				fprintf(stderr, "  arg[%d] = \"%s\"\n", i, argv[i]);
		}
	}
	/* path_clean: idempotent, and no empty, "." or ".." elements left in
	 * a rooted result. */
	static const char *const parts[] = {"/", "a", "..", ".", "//", "bc", "/..", "./"};
	for (long it = 0; it < iters && !ENOUGH(); it++) {
		char in[256] = "", a[260], b[260];
		int n = (int)below(12);
		for (int i = 0; i < n; i++)
			strcat(in, parts[below(sizeof parts / sizeof parts[0])]);
		path_clean(in, a);
		path_clean(a, b);
		CHECK(strcmp(a, b) == 0, "path_clean not idempotent: %s -> %s -> %s", in, a, b);
		if (a[0] == '/')
			CHECK(!strstr(a, "//") && !strstr(a, "/./") && !strstr(a, "/../") &&
			      strcmp(a + strlen(a) - (strlen(a) > 1 ? 2 : 1), "/.") != 0 &&
			      (strlen(a) == 1 || a[strlen(a) - 1] != '/'), "path_clean(%s) = %s", in, a);
	}
}

/* ---- durations ---- */

static void fuzz_duration(void)
{
	static const char *const seeds[] = {"2s", "1.5s", "500ms", "1m30s", "1h2m3s4ms5us6ns", "-0", ".5h",
					    "9223372036854775807ns", "12\xc2\xb5s", "0.830103483285477580700h"};
	static const char *const dict[] = {"ns", "us", "\xc2\xb5s", "\xce\xbcs", "ms", "s", "m", "h", ".", "-",
					   "+", "0", "9", "99999999999"};
	char buf[128], out[40];
	int64_t d, e;

	/* Every duration prints as Go prints it and reads back exactly. */
	for (long it = 0; it < iters && !ENOUGH(); it++) {
		switch (below(4)) {
		case 0: d = (int64_t)next(); break;
		case 1: d = (int64_t)(next() % 100000000000ULL) - 50000000000LL; break;
		case 2: d = (int64_t)(next() >> below(64)); break;
		default: d = below(2) ? INT64_MAX - (int64_t)below(1000) : INT64_MIN + (int64_t)below(1000);
		}
		format_duration(d, out);
		CHECK(parse_duration(out, strlen(out), &e) == 0 && e == d, "%" PRId64 " -> %s -> %" PRId64, d, out, e);
	}
	/* Mutated strings: what parses is a duration that round-trips. */
	for (long it = 0; it < iters && !ENOUGH(); it++) {
		const char *seed = seeds[below(sizeof seeds / sizeof seeds[0])];
		size_t len = strlen(seed);
		memcpy(buf, seed, len);
		len = mutate(buf, len, sizeof buf, dict, sizeof dict / sizeof dict[0]);
		char *exact = malloc(len ? len : 1);
		memcpy(exact, buf, len);
		if (parse_duration(exact, len, &d) == 0) {
			accepted++;
			format_duration(d, out);
			CHECK(parse_duration(out, strlen(out), &e) == 0 && e == d, "%" PRId64 " -> %s", d, out);
			if (FAILED_NOW())
				dump("duration", exact, len);
		}
		free(exact);
	}
}

/* ---- GPU token scan, against the obvious byte-by-byte search ---- */

static bool naive_has(const char *b, size_t n, const char *tok)
{
	size_t m = strlen(tok);
	for (size_t i = 0; i + m <= n; i++) {
		size_t j = 0;
		while (j < m && b[i + j] == tok[j])
			j++;
		if (j == m)
			return true;
	}
	return false;
}

/* The tokens of testdata/gputokens.vec, which the Go tests read too. */
static const char *gpu_tokens[16];
static size_t n_gpu_tokens;

static void load_gpu_tokens(const char *dir)
{
	static struct vec_file f;
	vec_load(dir, "gputokens.vec", &f);
	for (int i = 0; i < f.n; i++)
		for (int j = 0; j < f.r[i].n; j++)
			if (strcmp(f.r[i].l[j].key, "token") == 0 && n_gpu_tokens < 16)
				gpu_tokens[n_gpu_tokens++] = f.r[i].l[j].v[0].s;
	if (n_gpu_tokens == 0)
		vec_die(f.name, 0, "no token");
	/* f stays: the tokens point into it. */
}

static void fuzz_specscan(const char *spec, size_t spec_len)
{
	static const char *const dict[] = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICE", "cdi.k8s.io/",
					   "cdi.k8s.io", "/dev/nvidia", "/dev/nvidi", "\\", "\\u0041", "\"env\":[\"",
					   "\"muxflow.io/gpu\"", "\"muxflow.io/gpu"};
	size_t cap = spec_len + 1024;
	char *buf = malloc(cap);
	for (long it = 0; it < iters && !ENOUGH(); it++) {
		size_t len, off;
		if (below(64) == 0) {
			off = 0;
			len = spec_len;
		} else {
			off = below(spec_len);
			len = below(512);
			if (off + len > spec_len)
				len = spec_len - off;
		}
		memcpy(buf, spec + off, len);
		len = mutate(buf, len, cap, dict, sizeof dict / sizeof dict[0]);
		char *exact = malloc(len ? len : 1);
		memcpy(exact, buf, len);
		bool want = false;
		for (size_t t = 0; t < n_gpu_tokens && !want; t++)
			want = naive_has(exact, len, gpu_tokens[t]);
		accepted += !want;
		CHECK(spec_maybe_gpu(exact, len) == (int)want, "spec_maybe_gpu != naive search (%d)", want);
		if (FAILED_NOW())
			dump("spec", exact, len);
		free(exact);
	}
	free(buf);
}

/* ---- escapers: what they write reads back ---- */

static void put_utf8(uint32_t r, char *out, size_t *w)
{
	if (r < 0x80) {
		out[(*w)++] = (char)r;
	} else if (r < 0x800) {
		out[(*w)++] = (char)(0xc0 | (r >> 6));
		out[(*w)++] = (char)(0x80 | (r & 0x3f));
	} else {
		out[(*w)++] = (char)(0xe0 | (r >> 12));
		out[(*w)++] = (char)(0x80 | ((r >> 6) & 0x3f));
		out[(*w)++] = (char)(0x80 | (r & 0x3f));
	}
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static uint32_t hexn(const char *s, int n)
{
	uint32_t v = 0;
	for (int i = 0; i < n; i++)
		v = v * 16 + (uint32_t)hexval(s[i]);
	return v;
}

/* valid_prefix is the length of the valid UTF-8 sequence at s, 0 if
 * invalid: written independently of runlog.c's decoder. */
static size_t valid_utf8(const unsigned char *s, size_t n)
{
	uint32_t r;
	size_t need;
	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		need = 2;
		r = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		need = 3;
		r = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		need = 4;
		r = s[0] & 0x07;
	} else {
		return 0;
	}
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		r = (r << 6) | (s[i] & 0x3f);
	}
	static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
	if (r < min[need] || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
		return 0;
	return need;
}

static void fuzz_escapers(void)
{
	static const char *const frags[] = {"a", "\"", "\\", "\n", "\x01", "<", "&", "\x7f", "\xc3\xa9", "\xe2\x80\xa8",
					    "\xf0\x9f\x98\x80", "\xc2\x85", "\xed\xa0\x80", "\xc0\xaf", "\xe2\x80", "\xff",
					    "\xef\xbb\xbf", "%", " ", "~"};
	char in[128], out[128 * 10 + 8], dec[128 * 4 + 8], want[128 * 4 + 8];
	for (long it = 0; it < iters && !ENOUGH(); it++) {
		size_t n = 0;
		int parts = (int)below(12);
		for (int i = 0; i < parts; i++) {
			if (below(3) == 0) {
				in[n++] = (char)next();
			} else {
				const char *f = frags[below(sizeof frags / sizeof frags[0])];
				memcpy(in + n, f, strlen(f));
				n += strlen(f);
			}
		}
		/* JSON: no raw control characters, quotes or HTML bytes; decoding
		 * gives the input with each invalid byte as U+FFFD. */
		size_t w = json_escape(in, n, out), d = 0, k = 0;
		for (size_t i = 0; i < w; i++) {
			unsigned char c = (unsigned char)out[i];
			CHECK(c >= 0x20 && c != '"' && c != '<' && c != '>' && c != '&', "raw byte 0x%02x in JSON", c);
			if (c != '\\') {
				dec[d++] = (char)c;
				continue;
			}
			char e = out[++i];
			switch (e) {
			case 'u': put_utf8(hexn(out + i + 1, 4), dec, &d); i += 4; break;
			case 'n': dec[d++] = '\n'; break;
			case 't': dec[d++] = '\t'; break;
			case 'r': dec[d++] = '\r'; break;
			case 'b': dec[d++] = '\b'; break;
			case 'f': dec[d++] = '\f'; break;
			default: dec[d++] = e;
			}
		}
		for (size_t i = 0; i < n;) {
			size_t v = valid_utf8((const unsigned char *)in + i, n - i);
			if (v == 0) {
				memcpy(want + k, "\xef\xbf\xbd", 3);
				k += 3;
				i++;
			} else {
				memcpy(want + k, in + i, v);
				k += v;
				i += v;
			}
		}
		CHECK(d == k && memcmp(dec, want, d) == 0, "JSON escape does not decode back");
		/* Go-quoted text: unquoting gives the input exactly. */
		w = text_quote(in, n, out);
		d = 0;
		CHECK(w >= 2 && out[0] == '"' && out[w - 1] == '"', "not quoted");
		for (size_t i = 1; i + 1 < w; i++) {
			unsigned char c = (unsigned char)out[i];
			CHECK(c >= 0x20 && c != 0x7f && c != '"', "raw byte 0x%02x in quoted text", c);
			if (c != '\\') {
				dec[d++] = (char)c;
				continue;
			}
			char e = out[++i];
			switch (e) {
			case 'x': dec[d++] = (char)hexn(out + i + 1, 2); i += 2; break;
			case 'u': put_utf8(hexn(out + i + 1, 4), dec, &d); i += 4; break;
			case 'a': dec[d++] = '\a'; break;
			case 'b': dec[d++] = '\b'; break;
			case 'f': dec[d++] = '\f'; break;
			case 'n': dec[d++] = '\n'; break;
			case 'r': dec[d++] = '\r'; break;
			case 't': dec[d++] = '\t'; break;
			case 'v': dec[d++] = '\v'; break;
			default: dec[d++] = e;
			}
		}
		CHECK(d == n && memcmp(dec, in, n) == 0, "quoted text does not unquote back");
		/* Percent-encoding: only unreserved bytes and %XX, decoding back. */
		w = pct_encode(in, n, out);
		d = 0;
		for (size_t i = 0; i < w; i++) {
			if (out[i] == '%') {
				CHECK(hexval(out[i + 1]) >= 0 && hexval(out[i + 2]) >= 0 && !(out[i + 1] >= 'a') &&
				      !(out[i + 2] >= 'a'), "bad escape");
				dec[d++] = (char)hexn(out + i + 1, 2);
				i += 2;
			} else {
				CHECK(strchr("-._~", out[i]) || (out[i] >= '0' && out[i] <= '9') ||
				      (out[i] >= 'a' && out[i] <= 'z') || (out[i] >= 'A' && out[i] <= 'Z'),
				      "reserved byte 0x%02x left as is", (unsigned char)out[i]);
				dec[d++] = out[i];
			}
		}
		CHECK(d == n && memcmp(dec, in, n) == 0, "percent-encoding does not decode back");
		accepted++;
		if (FAILED_NOW())
			dump("escaper input", in, n);
	}
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(2);
	}
	char *buf = malloc(1 << 20);
	*len = fread(buf, 1, 1 << 20, f);
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	size_t plen, slen;
	if (argc != 4) {
		fprintf(stderr, "usage: fuzz DEFAULT_POLICY_TOML PLAIN_SPEC_JSON TESTDATA_DIR\n");
		return 2;
	}
	load_gpu_tokens(argv[3]);
	if (getenv("FUZZ_ITERS"))
		iters = atol(getenv("FUZZ_ITERS"));
	rng = getenv("FUZZ_SEED") ? strtoull(getenv("FUZZ_SEED"), NULL, 0) : 0x6d7578666c6f77ULL;
	char *policy = slurp(argv[1], &plen), *spec = slurp(argv[2], &slen);
	struct {
		const char *name;
		int kind;
	} runs[] = {{"policy scan", 0}, {"http response", 1}, {"runtime args", 2},
		    {"durations", 3},   {"GPU token scan", 4}, {"escapers", 5}};
	for (size_t i = 0; i < sizeof runs / sizeof runs[0] && !ENOUGH(); i++) {
		int before = check_failures;
		accepted = 0;
		switch (runs[i].kind) {
		case 0: fuzz_policy(policy, plen); break;
		case 1: fuzz_http(); break;
		case 2: fuzz_args(); break;
		case 3: fuzz_duration(); break;
		case 4: fuzz_specscan(spec, slen); break;
		case 5: fuzz_escapers(); break;
		}
		printf("fuzz: %-15s %ld inputs, %ld accepted (non-GPU for the token scan), %d failures\n",
		       runs[i].name, iters, accepted, check_failures - before);
	}
	free(policy);
	free(spec);
	return check_failures ? 1 : 0;
}
