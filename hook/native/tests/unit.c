/* unit.c: unit tests of hook/native's parsers and helpers that have no Go
 * twin, or check what a shared vector cannot (files, sizes, the process's
 * own state). The cases shared with the Go code (argv, clean paths,
 * durations, the policy scan, log lines, GPU tokens) are in the repository's
 * testdata/ and checked by vectors.c.
 * usage: unit DEFAULT_POLICY_TOML PLAIN_SPEC_JSON */
#include "args.h"
#include "bundle.h"
#include "check.h"
#include "execpath.h"
#include "httpresp.h"
#include "muxdcall.h"
#include "pctenc.h"
#include "policyscan.h"
#include "report.h"
#include "runlog.h"
#include "specscan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int check_failures;
static char tmp[] = "/tmp/muxflow-unit.XXXXXX";

static char *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	static char none[1];
	if (!f) {
		*len = 0;
		return NULL;
	}
	char *buf = malloc(32 << 20);
	*len = fread(buf, 1, 32 << 20, f);
	fclose(f);
	buf[*len] = '\0';
	(void)none;
	return buf;
}

static void write_file(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		perror(path);
		exit(2);
	}
	fchmod(fd, mode);
	close(fd);
}

static char *tpath(const char *name)
{
	static char bufs[8][4200];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, sizeof bufs[0], "%s/%s", tmp, name);
	return b;
}

/* ---- args (the shared cases are in testdata/args.vec) ---- */

static void test_args(void)
{
	/* A relative bundle with no cwd given uses the process's own. */
	{
		struct invocation inv;
		char err[256], here[PATH_MAX], want[PATH_MAX + 8];
		const char *args[] = {"create", "-b", "bb", "c"};
		CHECK(getcwd(here, sizeof here) != NULL, "getcwd");
		snprintf(want, sizeof want, "%s/bb", strcmp(here, "/") ? here : "");
		CHECK(parse_args(4, (char *const *)args, NULL, &inv, err, sizeof err) == 0, "own cwd: %s", err);
		CHECK_STR(inv.bundle, want);
	}
	/* A bundle longer than PATH_MAX is a parse error, not a truncation. */
	{
		struct invocation inv;
		char err[256];
		static char longb[PATH_MAX + 10];
		memset(longb, 'a', sizeof longb - 1);
		longb[0] = '/';
		const char *args[] = {"create", "-b", longb, "c"};
		CHECK(parse_args(4, (char *const *)args, "/", &inv, err, sizeof err) != 0 && strstr(err, "longer"),
		      "long bundle: %s", err);
	}
}

/* ---- policy scan (the shared cases are in testdata/policyscan.vec) ---- */

static void test_policy_scan(const char *default_toml)
{
	{
		struct policy p;
		CHECK(policy_scan("[hook]\ntimeout = \"1.5s\"\n", 24, &p) == 0 && p.timeout_ns == 1500000000LL,
		      "timeout_ns %lld", (long long)p.timeout_ns);
	}

	/* The shipped policy must be read, and say what the constants say. */
	{
		size_t len;
		char *doc = read_all(default_toml, &len);
		struct policy p;
		CHECK(doc != NULL, "cannot read %s", default_toml);
		if (doc) {
			CHECK(policy_scan(doc, len, &p) == 0, "the shipped policy %s is not scanned as sure", default_toml);
			CHECK_STR(p.runtime, POLICY_DEFAULT_RUNTIME);
			CHECK_STR(p.socket, POLICY_DEFAULT_SOCKET);
			CHECK_STR(p.timeout, POLICY_DEFAULT_TIMEOUT);
			free(doc);
		}
	}

	/* policy_load: the file's kinds and sizes. */
	{
		struct policy p;
		write_file(tpath("pol.toml"), "[hook]\nruntime = \"crun\"\n", 24, 0644);
		CHECK(policy_load(tpath("pol.toml"), &p) == 0 && strcmp(p.runtime, "crun") == 0, "load: %s", p.runtime);
		CHECK(policy_load(tpath("missing.toml"), &p) != 0, "a missing MUXFLOW_POLICY file must be unsure");
		CHECK(policy_load(tmp, &p) != 0, "a directory must be unsure");
		CHECK(mkfifo(tpath("fifo.toml"), 0600) == 0, "mkfifo");
		CHECK(policy_load(tpath("fifo.toml"), &p) != 0, "a FIFO must be unsure (and not hang)");
		char *big = calloc(1, POLICY_MAX_SIZE + 1);
		memset(big, '#', POLICY_MAX_SIZE + 1);
		write_file(tpath("big.toml"), big, POLICY_MAX_SIZE, 0644);
		CHECK(policy_load(tpath("big.toml"), &p) == 0, "a 1 MiB comment is fine");
		write_file(tpath("big.toml"), big, POLICY_MAX_SIZE + 1, 0644);
		CHECK(policy_load(tpath("big.toml"), &p) != 0, "over 1 MiB must be unsure");
		free(big);
	}
}

/* ---- GPU token scan ---- */

static void test_specscan(const char *plain_path)
{
	size_t len;
	char *plain = read_all(plain_path, &len);
	CHECK(plain && len > 1000, "cannot read %s", plain_path);
	if (!plain)
		return;
	CHECK(spec_maybe_gpu(plain, len) == 0, "the plain spec must be certainly non-GPU");
	CHECK(spec_maybe_gpu("", 0) == 0, "empty");
	/* Specs for and against each token: testdata/gputokens.vec (vectors.c). */
	/* A token at the very end of the buffer, and one cut by the length. */
	const char *tail = "xx/dev/nvidia";
	CHECK(spec_maybe_gpu(tail, strlen(tail)) == 1, "token at the end");
	CHECK(spec_maybe_gpu(tail, strlen(tail) - 1) == 0, "the length bounds the scan");
	free(plain);
}

/* ---- percent-encoding ---- */

static void test_pctenc(void)
{
	char out[3 * 256 + 1], in[256];
	pct_encode("my c1", 5, out);
	CHECK_STR(out, "my%20c1");
	pct_encode("/a b/\xc3\xbc?&=%+", 12, out);
	CHECK_STR(out, "%2Fa%20b%2F%C3%BC%3F%26%3D%25%2B");
	pct_encode("AZaz09-._~", 10, out);
	CHECK_STR(out, "AZaz09-._~");
	for (int i = 0; i < 256; i++)
		in[i] = (char)i;
	size_t n = pct_encode(in, 256, out);
	CHECK(n == 66 + 190 * 3, "all bytes: %zu", n);
	CHECK(strncmp(out, "%00%01", 6) == 0 && strcmp(out + n - 3, "%FF") == 0, "all bytes: %s", out);
}

/* ---- HTTP responses ---- */

struct http_case {
	const char *name, *raw;
	int status; /* 0: must fail */
	const char *body, *err;
};

static void test_http(void)
{
	static const struct http_case cases[] = {
		{"204", "HTTP/1.1 204 No Content\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n", 204, "", NULL},
		{"204 without reason", "HTTP/1.1 204\r\n\r\n", 204, "", NULL},
		{"200 body", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
		 200, "{\"a\":1}", NULL},
		{"header case", "HTTP/1.0 200 OK\r\ncOnTeNt-LeNgTh:   3  \r\n\r\nabc", 200, "abc", NULL},
		{"409 sentence",
		 "HTTP/1.1 409 Conflict\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"
		 "Content-Length: 24\r\n\r\ncontainer c1 is running\n",
		 409, "container c1 is running\n", NULL},
		{"same length twice", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 200, "x", NULL},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 200, "ok", NULL},
		{"empty 200 with length 0", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, "", NULL},
		{"empty", "", 0, NULL, "empty"},
		{"truncated body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", 0, NULL, "cut short: 5 of 10"},
		{"truncated headers", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n", 0, NULL, "inside the headers"},
		{"truncated status", "HTTP/1.1 200 O", 0, NULL, "inside the status line"},
		{"extra bytes", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy", 0, NULL, "1 bytes followed"},
		{"missing length", "HTTP/1.1 200 OK\r\n\r\n{}", 0, NULL, "without Content-Length"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 0, NULL,
		 "Transfer-Encoding"},
		{"oversized", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", 0, NULL, "over 32 MiB"},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx", 0, NULL, "two different"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: 1a\r\n\r\nx", 0, NULL, "bad Content-Length"},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, NULL, "bad Content-Length"},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n", 0, NULL, "bad Content-Length"},
		{"garbage status", "SSH-2.0-OpenSSH\r\n\r\n", 0, NULL, "bad status line"},
		{"http/2", "HTTP/2 200 OK\r\n\r\n", 0, NULL, "bad status line"},
		{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", 0, NULL, "bad status line"},
		{"glued reason", "HTTP/1.1 200OK\r\n\r\n", 0, NULL, "bad status line"},
		{"status 099", "HTTP/1.1 099 X\r\n\r\n", 0, NULL, "bad status line"},
		{"informational", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 0, NULL, "informational"},
		{"folded header", "HTTP/1.1 204 No Content\r\nA: b\r\n c\r\n\r\n", 0, NULL, "bad header line"},
		{"header without colon", "HTTP/1.1 204 No Content\r\nAb\r\n\r\n", 0, NULL, "bad header line"},
		{"space in name", "HTTP/1.1 204 No Content\r\nContent-Length : 0\r\n\r\n", 0, NULL, "bad header line"},
		{"204 with body", "HTTP/1.1 204 No Content\r\nContent-Length: 1\r\n\r\nx", 0, NULL, "no-content"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct http_case *c = &cases[i];
		struct http_response r;
		char err[256] = "";
		int rc = http_parse_response(c->raw, strlen(c->raw), &r, err, sizeof err);
		if (!c->status) {
			CHECK(rc != 0 && strstr(err, c->err), "%s: rc %d err \"%s\", want \"%s\"", c->name, rc, err, c->err);
			continue;
		}
		CHECK(rc == 0, "%s: %s", c->name, err);
		CHECK(r.status == c->status, "%s: status %d", c->name, r.status);
		CHECK(r.body_len == strlen(c->body) && memcmp(r.body, c->body, r.body_len) == 0, "%s: body %.*s",
		      c->name, (int)r.body_len, r.body);
	}
	/* Too many headers. */
	{
		static char raw[8192];
		size_t w = (size_t)sprintf(raw, "HTTP/1.1 204 No Content\r\n");
		for (int i = 0; i < 101; i++)
			w += (size_t)sprintf(raw + w, "X-%d: y\r\n", i);
		w += (size_t)sprintf(raw + w, "\r\n");
		struct http_response r;
		char err[256];
		CHECK(http_parse_response(raw, w, &r, err, sizeof err) != 0 && strstr(err, "100"), "header flood: %s", err);
	}
	/* The request head, byte for byte. */
	{
		struct muxd_request req = {.method = "POST", .target = "/v1/runtime/hooks/poststop", .body = "{}", .body_len = 2};
		size_t len;
		char *h = muxd_build_request(&req, &len);
		const char *want = "POST /v1/runtime/hooks/poststop HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
				   "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n";
		CHECK(h && len == strlen(want) && memcmp(h, want, len) == 0, "request head: %s", h);
		free(h);
		struct muxd_request del = {.method = "DELETE", .target = "/v1/containers/a%20b"};
		h = muxd_build_request(&del, &len);
		want = "DELETE /v1/containers/a%20b HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n\r\n";
		CHECK(h && len == strlen(want) && memcmp(h, want, len) == 0, "delete head: %s", h);
		free(h);
	}
}

/* ---- runc log file ---- */

static void test_runlog(void)
{
	size_t len;
	/* The lines themselves are in testdata/runlog.vec. */
	/* Appending: created 0600, lines accumulate. */
	const char *log = tpath("run.log");
	runlog_append(log, "json", "error", "one", NULL);
	runlog_append(log, "json", "error", "two", NULL);
	struct stat st;
	CHECK(stat(log, &st) == 0 && (st.st_mode & 0777) == 0600, "log mode %o", st.st_mode & 0777);
	char *data = read_all(log, &len);
	CHECK(data && strstr(data, "\"msg\":\"one\"") && strstr(data, "\"msg\":\"two\"") &&
	      strchr(data, '\n') != strrchr(data, '\n'), "log: %s", data);
	free(data);
}

/* ---- bundle ---- */

static void test_bundle(void)
{
	struct config_file cf;
	char err[512];
	const char *b = tpath("bundle");
	char cfgp[4200];
	size_t len;

	mkdir(b, 0755);
	snprintf(cfgp, sizeof cfgp, "%s/config.json", b);
	write_file(cfgp, "{\"a\":1}", 7, 0604);
	CHECK(config_open(b, &cf) == 0 && cf.len == 7 && memcmp(cf.data, "{\"a\":1}", 7) == 0,
	      "open: len %zu", cf.len);
	umask(077);
	CHECK(config_replace(&cf, "{\"b\":2}\n", 8, err, sizeof err) == 0, "replace: %s", err);
	char *data = read_all(cfgp, &len);
	struct stat st;
	CHECK(data && len == 8 && memcmp(data, "{\"b\":2}\n", 8) == 0, "replaced content");
	CHECK(stat(cfgp, &st) == 0 && (st.st_mode & 07777) == 0604, "mode kept: %o", st.st_mode & 07777);
	free(data);
	/* In place: the same inode, cut to the new length when it is shorter. */
	struct stat before;
	CHECK(stat(cfgp, &before) == 0, "stat");
	CHECK(config_replace(&cf, "{}", 2, err, sizeof err) == 0, "shorter: %s", err);
	data = read_all(cfgp, &len);
	CHECK(data && len == 2 && memcmp(data, "{}", 2) == 0, "shorter content: %zu bytes", len);
	free(data);
	CHECK(stat(cfgp, &st) == 0 && st.st_ino == before.st_ino, "config.json was replaced, not rewritten");
	/* A config.json swapped for a symlink is not written through, and
	 * what it points at stays as it was. */
	char outside[4200];
	snprintf(outside, sizeof outside, "%s", tpath("replace-outside.json"));
	write_file(outside, "{}", 2, 0644);
	unlink(cfgp);
	CHECK(symlink(outside, cfgp) == 0, "symlink");
	CHECK(config_replace(&cf, "{\"c\":3}", 7, err, sizeof err) != 0 && strstr(err, "open"),
	      "replace through a symlink must fail: %s", err);
	data = read_all(outside, &len);
	CHECK(data && len == 2 && memcmp(data, "{}", 2) == 0, "a symlink's target was written");
	free(data);
	unlink(cfgp);
	write_file(cfgp, "{}", 2, 0604);
	config_close(&cf);

	/* What must not be read: a symlink, a FIFO, a directory, an oversized
	 * file, a missing bundle. */
	unlink(cfgp);
	write_file(tpath("outside.json"), "{}", 2, 0644);
	CHECK(symlink(tpath("outside.json"), cfgp) == 0, "symlink");
	CHECK(config_open(b, &cf) != 0, "a symlinked config.json must not be followed");
	unlink(cfgp);
	CHECK(mkfifo(cfgp, 0600) == 0, "mkfifo");
	CHECK(config_open(b, &cf) != 0, "a FIFO must be refused without hanging");
	unlink(cfgp);
	mkdir(cfgp, 0755);
	CHECK(config_open(b, &cf) != 0, "a directory must be refused");
	rmdir(cfgp);
	int fd = open(cfgp, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && ftruncate(fd, CONFIG_MAX_SIZE + 1) == 0, "ftruncate");
	close(fd);
	CHECK(config_open(b, &cf) != 0, "over 16 MiB must be refused");
	CHECK(truncate(cfgp, CONFIG_MAX_SIZE) == 0 && config_open(b, &cf) == 0 && cf.len == CONFIG_MAX_SIZE,
	      "16 MiB exactly is fine");
	config_close(&cf);
	CHECK(config_open(tpath("nobundle"), &cf) != 0, "a missing bundle");
	CHECK(config_open(cfgp, &cf) != 0, "a bundle that is a file");
}

/* ---- runtime resolution ---- */

static void test_execpath(void)
{
	char out[PATH_MAX], dir[PATH_MAX];
	const char *bin = tpath("bin"), *bin2 = tpath("bin2");
	char p[4200], oldpath[8192];
	mkdir(bin, 0755);
	mkdir(bin2, 0755);

	CHECK(self_dir(dir, sizeof dir) == 0 && dir[0] == '/', "self_dir: %s", dir);
	CHECK(sibling("/a/b", "c", out, sizeof out) == 0 && strcmp(out, "/a/b/c") == 0, "sibling: %s", out);
	CHECK(sibling("/", "c", out, sizeof out) == 0 && strcmp(out, "/c") == 0, "sibling /: %s", out);
	CHECK(sibling("/a", "c", out, 4) != 0, "sibling must not truncate");

	snprintf(p, sizeof p, "%s/myrunc", bin);
	write_file(p, "#!/bin/sh\n", 10, 0755);
	CHECK(resolve_runtime(p, NULL, out, sizeof out) == 0 && strcmp(out, p) == 0, "by path: %s", out);
	snprintf(p, sizeof p, "%s/noexec", bin);
	write_file(p, "x", 1, 0644);
	CHECK(resolve_runtime(p, NULL, out, sizeof out) != 0, "a file without exec bits");
	CHECK(resolve_runtime(tpath("bin/none"), NULL, out, sizeof out) != 0, "a missing file");
	CHECK(resolve_runtime(bin, NULL, out, sizeof out) != 0, "a directory");
	CHECK(resolve_runtime("", NULL, out, sizeof out) != 0, "empty");

	const char *saved = getenv("PATH");
	snprintf(oldpath, sizeof oldpath, "%s", saved ? saved : "");
	/* PATH order, skipping what is not executable. */
	snprintf(p, sizeof p, "%s/myrunc", bin2);
	write_file(p, "#!/bin/sh\n", 10, 0755);
	snprintf(p, sizeof p, "%s/noexec", bin2);
	write_file(p, "#!/bin/sh\n", 10, 0755);
	snprintf(p, sizeof p, "/nonexistent:%s:%s", bin, bin2);
	setenv("PATH", p, 1);
	snprintf(p, sizeof p, "%s/myrunc", bin);
	CHECK(resolve_runtime("myrunc", NULL, out, sizeof out) == 0 && strcmp(out, p) == 0, "PATH first: %s", out);
	snprintf(p, sizeof p, "%s/noexec", bin2);
	CHECK(resolve_runtime("noexec", NULL, out, sizeof out) == 0 && strcmp(out, p) == 0, "PATH skip: %s", out);
	CHECK(resolve_runtime("nothere", NULL, out, sizeof out) != 0, "not in PATH");
	/* Found through a relative entry: refused, like Go's exec.ErrDot. */
	CHECK(chdir(bin) == 0, "chdir");
	setenv("PATH", "/nonexistent::/usr/bin", 1);
	CHECK(resolve_runtime("myrunc", NULL, out, sizeof out) != 0, "relative PATH entry");
	setenv("PATH", ".", 1);
	CHECK(resolve_runtime("myrunc", NULL, out, sizeof out) != 0, "PATH=.");
	CHECK(chdir("/") == 0, "chdir /");

	/* Loops: this very program (here the test binary) and the wrapper. */
	CHECK(resolve_runtime("/proc/self/exe", NULL, out, sizeof out) != 0, "self by /proc/self/exe");
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	self[n > 0 ? n : 0] = '\0';
	snprintf(p, sizeof p, "%s/runc", bin2);
	CHECK(symlink(self, p) == 0, "symlink self");
	setenv("PATH", bin2, 1);
	CHECK(resolve_runtime("runc", NULL, out, sizeof out) != 0, "self through a symlink in PATH");
	snprintf(p, sizeof p, "%s/" WRAPPER_NAME, bin);
	write_file(p, "#!/bin/sh\n", 10, 0755);
	char wr[4200];
	snprintf(wr, sizeof wr, "%s/wr", bin2);
	CHECK(link(p, wr) == 0, "hard link");
	CHECK(resolve_runtime(wr, bin, out, sizeof out) != 0, "the wrapper under another name");
	CHECK(resolve_runtime(wr, bin2, out, sizeof out) == 0, "no wrapper in that selfdir");
	setenv("PATH", oldpath, 1);
}

static void test_sentence(void)
{
	char *s = sentence("refused: no GPU 7\r\n\n", 20);
	CHECK_STR(s, "refused: no GPU 7");
	free(s);
	CHECK(sentence("\n \t", 3) == NULL, "blank sentence");
	s = sentence("a\0b", 3);
	CHECK_STR(s, "a");
	free(s);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: unit DEFAULT_POLICY_TOML PLAIN_SPEC_JSON\n");
		return 2;
	}
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 2;
	}
	test_args();
	test_policy_scan(argv[1]);
	test_specscan(argv[2]);
	test_pctenc();
	test_http();
	test_runlog();
	test_bundle();
	test_execpath();
	test_sentence();
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		check_failures++;
	if (check_failures) {
		fprintf(stderr, "unit: %d failures\n", check_failures);
		return 1;
	}
	printf("unit: ok\n");
	return 0;
}
