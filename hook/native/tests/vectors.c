/* vectors.c: holds hook/native's parsers and writers to the test vectors
 * they share with the Go code they stand in for (the testdata/ .vec files at the
 * repository root; the Go tests read the same files through tests/testvec).
 * usage: vectors TESTDATA_DIR */
#include "args.h"
#include "check.h"
#include "duration.h"
#include "policyscan.h"
#include "runlog.h"
#include "specscan.h"
#include "vec.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int check_failures;
static const char *dir;

static long long vec_ll(const struct vec_file *f, int lineno, const char *s)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s)
		vec_die(f->name, lineno, "not an integer");
	return v;
}

/* ---- args.vec: parse_args ---- */

static void test_args(void)
{
	struct vec_file f;
	vec_load(dir, "args.vec", &f);
	for (int i = 0; i < f.n; i++) {
		const struct vec_rec *r = &f.r[i];
		const struct vec_line *a = vec_get(r, "args");
		const char *name = vec_name(r);
		char *argv[64];
		int argc = a ? a->n : 0;
		if (argc >= 64)
			vec_die(f.name, r->lineno, "too many args");
		for (int k = 0; k < argc; k++)
			argv[k] = a->v[k].s;
		argv[argc] = NULL;
		struct invocation inv;
		char err[256] = "";
		int rc = parse_args(argc, argv, vec_str(r, "cwd", "/cwd"), &inv, err, sizeof err);
		const char *want_err = vec_str(r, "err", NULL);
		if (want_err) {
			CHECK(rc != 0 && strstr(err, want_err), "args.vec:%d %s: rc %d err \"%s\", want \"%s\"",
			      r->lineno, name, rc, err, want_err);
			CHECK(strcmp(inv.command, vec_str(r, "command", "")) == 0, "args.vec:%d %s: command %s",
			      r->lineno, name, inv.command);
			continue;
		}
		CHECK(rc == 0, "args.vec:%d %s: error %s", r->lineno, name, err);
		if (rc != 0)
			continue;
		static const char *const keys[] = {"command", "log", "log_format", "bundle", "id", "config"};
		const char *got[] = {inv.command, inv.log, inv.log_format, inv.bundle, inv.id, inv.config};
		for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
			const char *want = vec_str(r, keys[k], "");
			CHECK(strcmp(got[k], want) == 0, "args.vec:%d %s: %s \"%s\", want \"%s\"", r->lineno, name,
			      keys[k], got[k], want);
		}
		const char *pid_file = vec_str(r, "pid_file", NULL);
		if (pid_file)
			CHECK(strcmp(inv.pid_file, pid_file) == 0, "args.vec:%d %s: pid_file \"%s\"", r->lineno, name,
			      inv.pid_file);
	}
	vec_free(&f);
}

/* ---- cleanpath.vec: path_clean ---- */

static void test_cleanpath(void)
{
	struct vec_file f;
	vec_load(dir, "cleanpath.vec", &f);
	for (int i = 0; i < f.n; i++) {
		for (int j = 0; j < f.r[i].n; j++) {
			const struct vec_line *l = &f.r[i].l[j];
			if (strcmp(l->key, "clean") != 0 || l->n != 2)
				vec_die(f.name, l->lineno, "want: clean IN OUT");
			char out[l->v[0].len + 2];
			path_clean(l->v[0].s, out);
			CHECK(strcmp(out, l->v[1].s) == 0, "cleanpath.vec:%d: path_clean(%s) = %s, want %s", l->lineno,
			      l->v[0].s, out, l->v[1].s);
		}
	}
	vec_free(&f);
}

/* ---- duration.vec: parse_duration, format_duration ---- */

static void test_duration(void)
{
	struct vec_file f;
	vec_load(dir, "duration.vec", &f);
	int seen = 0;
	for (int i = 0; i < f.n; i++) {
		for (int j = 0; j < f.r[i].n; j++) {
			const struct vec_line *l = &f.r[i].l[j];
			int64_t ns = 12345;
			seen++;
			if (strcmp(l->key, "parse") == 0 && l->n == 2) {
				long long want = vec_ll(&f, l->lineno, l->v[1].s);
				int rc = parse_duration(l->v[0].s, l->v[0].len, &ns);
				CHECK(rc == 0 && ns == want, "duration.vec:%d: parse_duration(%s) = %d, %lld; want %lld",
				      l->lineno, l->v[0].s, rc, (long long)ns, want);
			} else if (strcmp(l->key, "bad") == 0 && l->n == 1) {
				CHECK(parse_duration(l->v[0].s, l->v[0].len, &ns) != 0,
				      "duration.vec:%d: parse_duration(%s) must fail", l->lineno, l->v[0].s);
			} else if (strcmp(l->key, "format") == 0 && l->n == 2) {
				char out[40];
				format_duration(vec_ll(&f, l->lineno, l->v[0].s), out);
				CHECK(strcmp(out, l->v[1].s) == 0, "duration.vec:%d: format_duration(%s) = %s, want %s",
				      l->lineno, l->v[0].s, out, l->v[1].s);
			} else {
				vec_die(f.name, l->lineno, "want: parse TEXT NS, bad TEXT or format NS TEXT");
			}
		}
	}
	CHECK(seen > 50, "duration.vec: only %d cases", seen);
	vec_free(&f);
}

/* ---- policyscan.vec: policy_scan ---- */

static void test_policyscan(void)
{
	struct vec_file f;
	vec_load(dir, "policyscan.vec", &f);
	for (int i = 0; i < f.n; i++) {
		const struct vec_rec *r = &f.r[i];
		const struct vec_val *doc = vec_val(r, "doc");
		const char *name = vec_name(r), *sure = vec_str(r, "sure", NULL);
		if (!doc || !sure)
			vec_die(f.name, r->lineno, "a case needs doc and sure");
		struct policy p;
		int rc = policy_scan(doc->s, doc->len, &p);
		CHECK((rc == 0) == (strcmp(sure, "1") == 0), "policyscan.vec:%d %s: rc %d, want sure %s", r->lineno,
		      name, rc, sure);
		if (rc != 0 || strcmp(sure, "1") != 0)
			continue;
		const char *rt = vec_str(r, "runtime", POLICY_DEFAULT_RUNTIME);
		const char *sock = vec_str(r, "socket", POLICY_DEFAULT_SOCKET);
		const char *to = vec_str(r, "timeout", POLICY_DEFAULT_TIMEOUT);
		CHECK(strcmp(p.runtime, rt) == 0, "policyscan.vec:%d %s: runtime %s, want %s", r->lineno, name,
		      p.runtime, rt);
		CHECK(strcmp(p.socket, sock) == 0, "policyscan.vec:%d %s: socket %s, want %s", r->lineno, name,
		      p.socket, sock);
		CHECK(strcmp(p.timeout, to) == 0, "policyscan.vec:%d %s: timeout %s, want %s", r->lineno, name,
		      p.timeout, to);
	}
	vec_free(&f);
}

/* ---- runlog.vec: json_escape, text_quote, rfc3339nano, runlog_line ---- */

static void test_runlog(void)
{
	struct vec_file f;
	vec_load(dir, "runlog.vec", &f);
	for (int i = 0; i < f.n; i++) {
		const struct vec_rec *r = &f.r[i];
		const char *kind = vec_kind(r);
		if (strcmp(kind, "escape") == 0) {
			const struct vec_val *in = vec_val(r, "escape");
			const char *want;
			char *out = malloc(10 * in->len + 3);
			if ((want = vec_str(r, "json", NULL))) {
				json_escape(in->s, in->len, out);
				CHECK(strcmp(out, want) == 0, "runlog.vec:%d: json_escape = %s, want %s", r->lineno, out, want);
			}
			if ((want = vec_str(r, "text", NULL))) {
				text_quote(in->s, in->len, out);
				CHECK(strcmp(out, want) == 0, "runlog.vec:%d: text_quote = %s, want %s", r->lineno, out, want);
			}
			free(out);
		} else if (strcmp(kind, "stamp") == 0) {
			for (int j = 0; j < r->n; j++) {
				const struct vec_line *l = &r->l[j];
				long long ns = vec_ll(&f, l->lineno, l->v[0].s);
				struct timespec ts = {ns / 1000000000, ns % 1000000000};
				char out[40];
				rfc3339nano(&ts, out);
				CHECK(strcmp(out, l->v[1].s) == 0, "runlog.vec:%d: rfc3339nano(%lld) = %s, want %s",
				      l->lineno, ns, out, l->v[1].s);
			}
		} else if (strcmp(kind, "line") == 0) {
			const struct vec_line *t = vec_get(r, "time");
			const char *want = vec_str(r, "want", NULL);
			if (!t || !want)
				vec_die(f.name, r->lineno, "a line needs time and want");
			long long ns = vec_ll(&f, t->lineno, t->v[0].s);
			struct timespec ts = {ns / 1000000000, ns % 1000000000};
			size_t len;
			char *l = runlog_line(vec_str(r, "format", ""), vec_str(r, "level", ""), vec_str(r, "msg", ""),
					      vec_str(r, "container", NULL), &ts, &len);
			CHECK(l && strcmp(l, want) == 0 && len == strlen(want), "runlog.vec:%d %s: line %s, want %s",
			      r->lineno, vec_name(r), l, want);
			free(l);
		} else {
			vec_die(f.name, r->lineno, "unknown record");
		}
	}
	vec_free(&f);
}

/* ---- gputokens.vec: spec_maybe_gpu ---- */

static void test_gputokens(void)
{
	struct vec_file f;
	vec_load(dir, "gputokens.vec", &f);
	int tokens = 0;
	for (int i = 0; i < f.n; i++) {
		const struct vec_rec *r = &f.r[i];
		if (strcmp(vec_kind(r), "token") == 0) {
			/* Each token alone is enough; each token cut by one byte is
			 * not (none of them holds another). */
			for (int j = 0; j < r->n; j++) {
				const struct vec_val *t = &r->l[j].v[0];
				tokens++;
				CHECK(spec_maybe_gpu(t->s, t->len) == 1, "gputokens.vec:%d: the token %s alone",
				      r->l[j].lineno, t->s);
				CHECK(spec_maybe_gpu(t->s, t->len - 1) == 0, "gputokens.vec:%d: the token %s cut by a byte",
				      r->l[j].lineno, t->s);
			}
			continue;
		}
		const struct vec_val *raw = vec_val(r, "json");
		const char *want = vec_str(r, "maybe_gpu", NULL);
		if (!raw || !want)
			vec_die(f.name, r->lineno, "a spec needs json and maybe_gpu");
		CHECK(spec_maybe_gpu(raw->s, raw->len) == atoi(want), "gputokens.vec:%d %s: spec_maybe_gpu != %s",
		      r->lineno, vec_name(r), want);
		/* The length bounds the scan. */
		if (atoi(want) == 1 && raw->len > 0)
			CHECK(spec_maybe_gpu(raw->s, 0) == 0, "gputokens.vec:%d: empty prefix", r->lineno);
	}
	CHECK(tokens >= 4, "gputokens.vec: %d tokens", tokens);
	vec_free(&f);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: vectors TESTDATA_DIR\n");
		return 2;
	}
	dir = argv[1];
	test_args();
	test_cleanpath();
	test_duration();
	test_policyscan();
	test_runlog();
	test_gputokens();
	if (check_failures) {
		fprintf(stderr, "vectors: %d failures\n", check_failures);
		return 1;
	}
	printf("vectors: ok\n");
	return 0;
}
