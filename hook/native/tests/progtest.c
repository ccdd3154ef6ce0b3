/* progtest.c: tests of the built muxflow-runtime and muxflow-hook as
 * containerd and runc run them: each case gets a directory with a copy of
 * the binaries (and a stand-in muxflow-wrapper beside them), a stand-in
 * runtime first on PATH, a bundle, a policy, and where it matters a fake
 * muxd: a forked child listening on a unix socket that records each
 * request and sends a canned answer.
 * usage: progtest BINDIR FAKERUNTIME PLAIN_SPEC_JSON */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int check_failures;
static char root[] = "/tmp/muxflow-prog.XXXXXX";
static const char *src_bin, *fakert;
static char *plain;
static size_t plain_len;

static const char gpu_spec[] =
	"{\"ociVersion\":\"1.1.0\",\"process\":{\"env\":[\"PATH=/bin\",\"NVIDIA_VISIBLE_DEVICES=0\"]},"
	"\"root\":{\"path\":\"rootfs\"}}";
static const char wired_spec[] =
	"{\"ociVersion\":\"1.1.0\",\"process\":{\"env\":[\"PATH=/bin\",\"NVIDIA_VISIBLE_DEVICES=0\","
	"\"LD_PRELOAD=/usr/lib/muxflow/libxcuda.so\"]},\"root\":{\"path\":\"rootfs\"},\"hooks\":{}}\n";

struct env {
	char dir[256], bin[300], path[300], bundle[300], out[300], policy[300], sock[300], log[300];
	char realbin[PATH_MAX];
	const char *policy_env; /* MUXFLOW_POLICY, or NULL for unset */
	bool nopid;             /* the fake runtime writes no pid file */
};

struct result {
	int status; /* exit code, or 128+signal */
	char *err;  /* stderr */
	size_t errlen;
	double secs;
};

/* ---- files ---- */

static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY);
	size_t cap = 1 << 16, n = 0;
	char *buf;
	ssize_t r;
	if (fd < 0) {
		*len = 0;
		return NULL;
	}
	buf = malloc(cap + 1);
	while ((r = read(fd, buf + n, cap - n)) > 0) {
		n += (size_t)r;
		if (n == cap)
			buf = realloc(buf, (cap *= 2) + 1);
	}
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
}

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
		perror(path);
		exit(2);
	}
	fchmod(fd, mode);
	close(fd);
}

static char *pathf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	return buf;
}
#define P(...) pathf((char[PATH_MAX]){0}, PATH_MAX, __VA_ARGS__)

static void copy(const char *from, const char *to)
{
	size_t len;
	struct stat st;
	char *data = read_file(from, &len);
	if (!data || stat(from, &st) != 0) {
		fprintf(stderr, "progtest: cannot read %s\n", from);
		exit(2);
	}
	write_file(to, data, len, st.st_mode & 0777);
	free(data);
}

static bool file_is(const char *path, const void *want, size_t len)
{
	size_t got;
	char *data = read_file(path, &got);
	bool ok = data && got == len && memcmp(data, want, len) == 0;
	free(data);
	return ok;
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static char *replace_all(const char *s, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to), n = 0;
	char *out = malloc(strlen(s) * (tl + 1) + 1);
	for (const char *p = s; *p;) {
		if (strncmp(p, from, fl) == 0) {
			memcpy(out + n, to, tl);
			n += tl;
			p += fl;
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
	return out;
}

/* pct is the test's own percent-encoder: unreserved bytes kept, others %XX. */
static char *pct(const char *s)
{
	char *out = malloc(3 * strlen(s) + 1), *w = out;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-._~", c))
			*w++ = (char)c;
		else
			w += sprintf(w, "%%%02X", c);
	}
	*w = '\0';
	return out;
}

/* ---- a case's directory ---- */

static void setup(struct env *e, const char *name, const char *policy_doc, const char *config, size_t config_len)
{
	memset(e, 0, sizeof *e);
	snprintf(e->dir, sizeof e->dir, "%s/%s", root, name);
	snprintf(e->bin, sizeof e->bin, "%s/bin", e->dir);
	snprintf(e->path, sizeof e->path, "%s/path", e->dir);
	snprintf(e->bundle, sizeof e->bundle, "%s/bundle", e->dir);
	snprintf(e->out, sizeof e->out, "%s/out", e->dir);
	snprintf(e->policy, sizeof e->policy, "%s/policy.toml", e->dir);
	snprintf(e->sock, sizeof e->sock, "%s/m.sock", e->dir);
	snprintf(e->log, sizeof e->log, "%s/runtime.log", e->dir);
	for (const char *d = e->dir; d; d = d == e->dir ? e->bin : d == e->bin ? e->path : d == e->path ? e->bundle : d == e->bundle ? e->out : NULL)
		if (mkdir(d, 0755) != 0) {
			perror(d);
			exit(2);
		}
	copy(P("%s/muxflow-runtime", src_bin), P("%s/muxflow-runtime", e->bin));
	copy(P("%s/muxflow-hook", src_bin), P("%s/muxflow-hook", e->bin));
	copy(fakert, P("%s/muxflow-wrapper", e->bin));
	copy(fakert, P("%s/fakerunc", e->path));
	char *a = replace_all(policy_doc, "SOCK", e->sock), *b = replace_all(a, "BIN", e->bin);
	write_file(e->policy, b, strlen(b), 0644);
	free(a);
	free(b);
	if (config)
		write_file(P("%s/config.json", e->bundle), config, config_len, 0644);
	if (!realpath(e->bin, e->realbin)) {
		perror("realpath");
		exit(2);
	}
	e->policy_env = e->policy;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* run starts bin/prog with args (NULL-terminated) in the case's directory,
 * stdin from in, and waits for it (30 s at most). */
static struct result run(struct env *e, const char *prog, const char *const *args, const char *in, size_t inlen)
{
	struct result r = {0};
	const char *argv[32];
	char *envp[10], envbuf[8][PATH_MAX];
	int n = 0, k = 0;

	argv[n++] = prog;
	for (int i = 0; args[i]; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	snprintf(envbuf[k], PATH_MAX, "PATH=%s:/usr/bin:/bin", e->path), envp[k] = envbuf[k], k++;
	snprintf(envbuf[k], PATH_MAX, "FAKE_OUT=%s", e->out), envp[k] = envbuf[k], k++;
	snprintf(envbuf[k], PATH_MAX, "MUXFLOW_TEST_ENV=passed through"), envp[k] = envbuf[k], k++;
	/* The fake runtime reports this process as the container's: it lives on. */
	snprintf(envbuf[k], PATH_MAX, "FAKE_PID=%d", (int)getpid()), envp[k] = envbuf[k], k++;
	if (e->nopid)
		snprintf(envbuf[k], PATH_MAX, "FAKE_NOPID=1"), envp[k] = envbuf[k], k++;
	if (e->policy_env)
		snprintf(envbuf[k], PATH_MAX, "MUXFLOW_POLICY=%s", e->policy_env), envp[k] = envbuf[k], k++;
	if (getenv("ASAN_OPTIONS"))
		snprintf(envbuf[k], PATH_MAX, "ASAN_OPTIONS=%s", getenv("ASAN_OPTIONS")), envp[k] = envbuf[k], k++;
	if (getenv("UBSAN_OPTIONS"))
		snprintf(envbuf[k], PATH_MAX, "UBSAN_OPTIONS=%s", getenv("UBSAN_OPTIONS")), envp[k] = envbuf[k], k++;
	envp[k] = NULL;
	write_file(P("%s/stdin", e->dir), in ? in : "", in ? inlen : 0, 0600);

	double t0 = now();
	pid_t pid = fork();
	if (pid == 0) {
		int fd0 = open(P("%s/stdin", e->dir), O_RDONLY);
		int fd2 = open(P("%s/stderr", e->dir), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int fd1 = open(P("%s/stdout", e->dir), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd0 < 0 || fd1 < 0 || fd2 < 0 || chdir(e->dir) != 0)
			_exit(120);
		dup2(fd0, 0);
		dup2(fd1, 1);
		dup2(fd2, 2);
		execve(P("%s/%s", e->bin, prog), (char *const *)argv, envp);
		_exit(121);
	}
	int st = 0;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (now() - t0 > 30) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			CHECK(0, "%s in %s ran for over 30 s", prog, e->dir);
			break;
		}
		nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
	r.secs = now() - t0;
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.err = read_file(P("%s/stderr", e->dir), &r.errlen);
	return r;
}

/* ---- fake muxd ---- */

static void set_sun_path(struct sockaddr_un *a, const char *path)
{
	if (strlen(path) >= sizeof a->sun_path) {
		fprintf(stderr, "progtest: socket path %s too long\n", path);
		exit(2);
	}
	memcpy(a->sun_path, path, strlen(path) + 1);
}

struct answer {
	const char *raw; /* NULL: never answer, wait for the client to hang up */
	size_t len;
};

struct muxd {
	pid_t pid;
	int lfd;
	int n;
};

#define ANSWER(s) ((struct answer){s, sizeof(s) - 1})

static size_t content_length(const char *head, size_t len)
{
	const char *p = memmem(head, len, "Content-Length: ", 16);
	return p ? (size_t)strtoul(p + 16, NULL, 10) : 0;
}

/* muxd_start listens on the case's socket; with n answers, a child
 * serves n connections one after the other, recording req.<i>. */
static void muxd_start(struct muxd *m, struct env *e, int n, const struct answer *answers)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	set_sun_path(&addr, e->sock);
	m->n = n;
	m->pid = 0;
	m->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (m->lfd < 0 || bind(m->lfd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(m->lfd, 8) != 0) {
		perror("fake muxd");
		exit(2);
	}
	if (n == 0)
		return;
	m->pid = fork();
	if (m->pid != 0)
		return;
	alarm(20);
	static char req[(2 << 20) + 4096];
	for (int i = 0; i < n; i++) {
		int c = accept(m->lfd, NULL, NULL);
		size_t got = 0, want = 0;
		if (c < 0)
			_exit(10);
		for (;;) {
			ssize_t r = recv(c, req + got, sizeof req - got, 0);
			if (r <= 0)
				break;
			got += (size_t)r;
			const char *end = memmem(req, got, "\r\n\r\n", 4);
			if (end) {
				want = (size_t)(end + 4 - req) + content_length(req, (size_t)(end - req));
				if (got >= want)
					break;
			}
		}
		write_file(P("%s/req.%d", e->dir, i), req, got, 0644);
		if (answers[i].raw) {
			if (write(c, answers[i].raw, answers[i].len) != (ssize_t)answers[i].len)
				_exit(11);
		} else {
			char b;
			while (recv(c, &b, 1, 0) > 0)
				;
		}
		close(c);
	}
	_exit(0);
}

/* muxd_done waits for the fake muxd and closes it; false when it did not
 * serve all its connections. */
static bool muxd_done(struct muxd *m)
{
	bool ok = true;
	if (m->pid > 0) {
		int st;
		double t0 = now();
		while (waitpid(m->pid, &st, WNOHANG) == 0) {
			if (now() - t0 > 10) {
				kill(m->pid, SIGKILL);
				waitpid(m->pid, &st, 0);
				break;
			}
			nanosleep(&(struct timespec){0, 1000000}, NULL);
		}
		ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	close(m->lfd);
	return ok;
}

/* muxd_untouched says whether nobody connected to a listener without a
 * serving child. */
static bool muxd_untouched(struct muxd *m)
{
	struct pollfd p = {.fd = m->lfd, .events = POLLIN};
	return poll(&p, 1, 0) == 0;
}

/* ---- expectations ---- */

/* ran says whether the stand-in program `name` ran with argv[0] = name
 * and exactly args after it. */
static bool ran(struct env *e, const char *name, const char *const *args)
{
	char want[8192];
	size_t n = 0;
	memcpy(want, name, strlen(name) + 1);
	n += strlen(name) + 1;
	for (int i = 0; args[i]; i++) {
		memcpy(want + n, args[i], strlen(args[i]) + 1);
		n += strlen(args[i]) + 1;
	}
	return file_is(P("%s/%s.argv", e->out, name), want, n);
}

static bool ran_nothing(struct env *e)
{
	return !exists(P("%s/fakerunc.argv", e->out)) && !exists(P("%s/muxflow-wrapper.argv", e->out));
}

static bool config_is(struct env *e, const char *data, size_t len)
{
	return file_is(P("%s/config.json", e->bundle), data, len);
}

static char *create_request(const char *id, const char *bundle, const char *pid_file, const char *body, size_t len,
			    size_t *outlen)
{
	char *pi = pct(id), *pb = pct(bundle), *ph = pid_file ? pct(pid_file) : strdup("");
	char *r = malloc(strlen(pi) + strlen(pb) + strlen(ph) + len + 512);
	int n = sprintf(r,
			"POST /v1/runtime/create?id=%s&bundle=%s%s%s HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			"Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			pi, pb, pid_file ? "&pid_file=" : "", ph, len);
	memcpy(r + n, body, len);
	*outlen = (size_t)n + len;
	free(pi);
	free(pb);
	free(ph);
	return r;
}

static void done(struct result *r)
{
	free(r->err);
}

#define POLICY "[node]\nsocket = \"SOCK\"\n[hook]\nruntime = \"fakerunc\"\n"

/* ---- muxflow-runtime ---- */

static void test_non_gpu_create(void)
{
	struct env e;
	struct muxd m;
	setup(&e, "non-gpu", POLICY, plain, plain_len);
	muxd_start(&m, &e, 0, NULL);
	const char *args[] = {"--root", "/run/containerd/runc/k8s.io", "--log", e.log, "--log-format", "json", "create",
			      "--bundle", e.bundle, "--pid-file", P("%s/init.pid", e.dir), "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(r.status == 0 && r.errlen == 0, "non-GPU create: status %d, stderr %s", r.status, r.err);
	CHECK(ran(&e, "fakerunc", args), "non-GPU create: the runtime did not get the arguments unchanged");
	CHECK(file_is(P("%s/fakerunc.config", e.out), plain, plain_len) && config_is(&e, plain, plain_len),
	      "non-GPU create: config.json changed");
	CHECK(file_is(P("%s/fakerunc.env", e.out), "passed through", 14), "non-GPU create: environment changed");
	CHECK(muxd_untouched(&m), "non-GPU create: muxd was called");
	CHECK(!exists(e.log), "non-GPU create: the fast path wrote a log");
	muxd_done(&m);
	done(&r);
}

static void test_gpu_create_204(void)
{
	struct env e;
	struct muxd m;
	struct answer a[] = {ANSWER("HTTP/1.1 204 No Content\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n")};
	setup(&e, "gpu-204", POLICY, gpu_spec, sizeof gpu_spec - 1);
	muxd_start(&m, &e, 1, a);
	const char *args[] = {"--log", e.log, "create", "--bundle", e.bundle, "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "204: muxd was not called");
	CHECK(r.status == 0 && r.errlen == 0, "204: status %d, stderr %s", r.status, r.err);
	CHECK(ran(&e, "fakerunc", args), "204: the runtime did not get the arguments unchanged");
	CHECK(config_is(&e, gpu_spec, sizeof gpu_spec - 1), "204: config.json changed");
	size_t len;
	/* No hook: the pid file muxflow-runtime would add, for muxd to watch. */
	char *want = create_request("c1", e.bundle, P("%s/muxflow-init.pid", e.bundle), gpu_spec, sizeof gpu_spec - 1, &len);
	size_t glen;
	char *got = read_file(P("%s/req.0", e.dir), &glen);
	CHECK(got && glen == len && memcmp(got, want, len) == 0, "204: request\n%.*s\nwant\n%s", (int)glen, got, want);
	CHECK(!exists(e.log), "204: a log line was written");
	free(want);
	free(got);
	done(&r);
}

static void test_gpu_create_200(void)
{
	struct env e;
	struct muxd m;
	char answer[1024];
	int n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			 sizeof wired_spec - 1, wired_spec);
	struct answer a[] = {{answer, (size_t)n}, ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
	setup(&e, "gpu 200", POLICY, NULL, 0);
	/* A relative bundle with a space, a config.json whose mode the umask
	 * would change, an id with a space. */
	CHECK(mkdir(P("%s/bun dle", e.dir), 0755) == 0, "mkdir");
	write_file(P("%s/bun dle/config.json", e.dir), gpu_spec, sizeof gpu_spec - 1, 0666);
	muxd_start(&m, &e, 2, a);
	const char *args[] = {"--log", e.log, "--log-format", "text", "run", "-b", "bun dle", "--detach", "my c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "200: muxd did not get the create and the pid");
	CHECK(r.status == 0 && r.errlen == 0, "200: status %d, stderr %s", r.status, r.err);
	/* Without a --pid-file, one in the bundle is added after the command. */
	char *pidfile = P("%s/bun dle/muxflow-init.pid", e.dir);
	const char *with_pid[] = {"--log", e.log, "--log-format", "text", "run", "--pid-file", pidfile,
				  "-b", "bun dle", "--detach", "my c1", NULL};
	CHECK(ran(&e, "fakerunc", with_pid), "200: the runtime did not get the arguments with the pid file added");
	size_t glen0;
	char *report = read_file(P("%s/req.1", e.dir), &glen0);
	char body[64];
	snprintf(body, sizeof body, "{\"id\":\"my c1\",\"pid\":%d}", (int)getpid());
	char *want_report = P("POST /v1/runtime/hooks/create-runtime HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", strlen(body), body);
	CHECK(report && glen0 == strlen(want_report) && memcmp(report, want_report, glen0) == 0,
	      "200: pid report\n%.*s\nwant\n%s", report ? (int)glen0 : 0, report ? report : "", want_report);
	free(report);
	CHECK(file_is(P("%s/bun dle/config.json", e.dir), wired_spec, sizeof wired_spec - 1),
	      "200: config.json is not muxd's");
	CHECK(file_is(P("%s/fakerunc.config", e.out), wired_spec, sizeof wired_spec - 1),
	      "200: the runtime did not see muxd's config.json");
	struct stat st;
	CHECK(stat(P("%s/bun dle/config.json", e.dir), &st) == 0 && (st.st_mode & 07777) == 0666,
	      "200: mode %o, want 0666", st.st_mode & 07777);
	size_t len, glen;
	char *bundle = P("%s/bun dle", e.dir);
	char *want = create_request("my c1", bundle, pidfile, gpu_spec, sizeof gpu_spec - 1, &len);
	char *got = read_file(P("%s/req.0", e.dir), &glen);
	CHECK(got && glen == len && memcmp(got, want, len) == 0, "200: request\n%.*s\nwant\n%s", (int)glen, got, want);
	CHECK(got && strstr(got, "?id=my%20c1&bundle=%2F") && strstr(got, "bun%20dle&pid_file=%2F") &&
		      strstr(got, "muxflow-init.pid HTTP/1.1"),
	      "200: percent-encoding: %.200s", got);
	char *log = read_file(e.log, &len);
	CHECK(log && strncmp(log, "time=\"", 6) == 0 &&
	      strstr(log, "\" level=info msg=\"muxflow: GPU container wired\" container=\"my c1\"\n") &&
	      strchr(log, '\n') == log + len - 1, "200: log %s", log);
	free(want);
	free(got);
	free(log);
	done(&r);
}

/* 201: muxd watches the pid file itself, so nothing reports the pid; the
 * pid file is still added to a command line without one. */
static void test_gpu_create_201(void)
{
	struct env e;
	struct muxd m;
	char answer[1024];
	int n = snprintf(answer, sizeof answer, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			 sizeof wired_spec - 1, wired_spec);
	struct answer a[] = {{answer, (size_t)n}};
	setup(&e, "gpu-201", POLICY, gpu_spec, sizeof gpu_spec - 1);
	muxd_start(&m, &e, 1, a);
	const char *args[] = {"--log", e.log, "create", "--bundle", e.bundle, "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "201: muxd did not get the create");
	CHECK(r.status == 0 && r.errlen == 0, "201: status %d, stderr %s", r.status, r.err);
	char *pidfile = P("%s/muxflow-init.pid", e.bundle);
	const char *with_pid[] = {"--log", e.log, "create", "--pid-file", pidfile, "--bundle", e.bundle, "c1", NULL};
	CHECK(ran(&e, "fakerunc", with_pid), "201: the runtime did not get the arguments with the pid file added");
	CHECK(config_is(&e, wired_spec, sizeof wired_spec - 1), "201: config.json is not muxd's");
	size_t len, glen;
	char *want = create_request("c1", e.bundle, pidfile, gpu_spec, sizeof gpu_spec - 1, &len);
	char *got = read_file(P("%s/req.0", e.dir), &glen);
	CHECK(got && glen == len && memcmp(got, want, len) == 0, "201: request\n%.*s\nwant\n%s", (int)glen, got, want);
	/* Give a reporter, were there one, the time to call. */
	usleep(200 * 1000);
	CHECK(!exists(P("%s/req.1", e.dir)), "201: something reported the pid to muxd");
	free(want);
	free(got);
	done(&r);
}

/* containerd's create names a pid file: the command line stays as it came
 * and the pid read from that file goes to muxd. */
static void test_gpu_create_reports_pid(void)
{
	struct env e;
	struct muxd m;
	char answer[1024];
	int n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
			 sizeof wired_spec - 1, wired_spec);
	struct answer a[] = {{answer, (size_t)n}, ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
	setup(&e, "reports-pid", POLICY, gpu_spec, sizeof gpu_spec - 1);
	/* A stale pid file must not be taken for the runtime's. */
	write_file(P("%s/init.pid", e.dir), "1", 1, 0644);
	muxd_start(&m, &e, 2, a);
	const char *args[] = {"--log", e.log, "create", "--bundle", e.bundle, "--pid-file", "init.pid", "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "pid file: muxd did not get the create and the pid");
	CHECK(r.status == 0 && r.errlen == 0, "pid file: status %d, stderr %s", r.status, r.err);
	CHECK(ran(&e, "fakerunc", args), "pid file: the runtime did not get the arguments unchanged");
	size_t len;
	char *report = read_file(P("%s/req.1", e.dir), &len);
	CHECK(report && strstr(report, "POST /v1/runtime/hooks/create-runtime ") &&
	      strstr(report, P("\r\n\r\n{\"id\":\"c1\",\"pid\":%d}", (int)getpid())),
	      "pid file: report %s", report ? report : "(none)");
	CHECK(!exists(P("%s/muxflow-init.pid", e.bundle)), "pid file: a pid file was added anyway");
	free(report);
	done(&r);
}

/* A runtime that fails before the container's process exists writes no pid
 * file: muxd is told to forget the container. */
static void test_gpu_create_runtime_fails_early(void)
{
	struct env e;
	struct muxd m;
	char answer[1024];
	int n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s",
			 sizeof wired_spec - 1, wired_spec);
	struct answer a[] = {{answer, (size_t)n}, ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
	setup(&e, "no-pid", POLICY, gpu_spec, sizeof gpu_spec - 1);
	e.nopid = true;
	muxd_start(&m, &e, 2, a);
	const char *args[] = {"create", "--bundle", e.bundle, "c 2", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "no pid: muxd did not get the create and the delete");
	const char del[] = "DELETE /v1/containers/c%202 HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n\r\n";
	CHECK(file_is(P("%s/req.1", e.dir), del, sizeof del - 1), "no pid: no DELETE after the runtime exited");
	done(&r);
}

static void test_gpu_create_refused(void)
{
	struct env e;
	struct muxd m;
	const char sentence[] = "muxd: container c1 asks for GPU 7, and this node has GPUs 0-3";
	char answer[512];
	int n = snprintf(answer, sizeof answer,
			 "HTTP/1.1 409 Conflict\r\nContent-Type: text/plain; charset=utf-8\r\n"
			 "X-Content-Type-Options: nosniff\r\nContent-Length: %zu\r\n\r\n%s\n",
			 sizeof sentence, sentence);
	struct answer a[] = {{answer, (size_t)n}};
	setup(&e, "refused", POLICY, gpu_spec, sizeof gpu_spec - 1);
	const char before[] = "{\"level\":\"info\",\"msg\":\"before\"}\n";
	write_file(e.log, before, sizeof before - 1, 0600);
	muxd_start(&m, &e, 1, a);
	const char *args[] = {"--log", e.log, "--log-format", "json", "create", "--bundle", e.bundle, "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "409: muxd was not called");
	CHECK(r.status == 1, "409: status %d", r.status);
	CHECK(r.err && strcmp(r.err, P("%s\n", sentence)) == 0, "409: stderr \"%s\"", r.err);
	CHECK(ran_nothing(&e), "409: something ran");
	CHECK(config_is(&e, gpu_spec, sizeof gpu_spec - 1), "409: config.json changed");
	size_t len;
	char *log = read_file(e.log, &len);
	char *want = P("%s{\"level\":\"error\",\"msg\":\"%s\",\"time\":\"", before, sentence);
	CHECK(log && strncmp(log, want, strlen(want)) == 0 && strcmp(log + len - 4, "Z\"}\n") == 0 &&
	      strchr(log + strlen(want), '\n') == log + len - 1, "409: log %s", log);
	free(log);
	done(&r);
}

static void test_muxd_down(void)
{
	struct env e;
	const char *args[] = {"create", "--bundle", NULL, "c1", NULL};

	/* No socket at all. */
	setup(&e, "muxd-absent", POLICY, gpu_spec, sizeof gpu_spec - 1);
	args[2] = e.bundle;
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(r.status == 0 && ran(&e, "muxflow-wrapper", args), "muxd absent: status %d, stderr %s; want the wrapper",
	      r.status, r.err);
	CHECK(!exists(P("%s/fakerunc.argv", e.out)), "muxd absent: the runtime ran");
	done(&r);

	/* A socket nobody listens on. */
	setup(&e, "muxd-refusing", POLICY, gpu_spec, sizeof gpu_spec - 1);
	args[2] = e.bundle;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	set_sun_path(&addr, e.sock);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "bind");
	r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(r.status == 0 && ran(&e, "muxflow-wrapper", args), "muxd refusing: status %d, stderr %s; want the wrapper",
	      r.status, r.err);
	close(fd);
	done(&r);
}

static void test_other_commands(void)
{
	static const char *const cmds[][6] = {
		{"--root", "/r", "delete", "--force", "c1", NULL},
		{"state", "c1", NULL},
		{"--log", "/l", "kill", "c1", "KILL", NULL},
		{"start", "c1", NULL},
		{"--version", NULL},
	};
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		struct env e;
		struct muxd m;
		setup(&e, P("cmd%zu", i), POLICY, gpu_spec, sizeof gpu_spec - 1);
		muxd_start(&m, &e, 0, NULL);
		struct result r = run(&e, "muxflow-runtime", cmds[i], NULL, 0);
		CHECK(r.status == 0 && ran(&e, "fakerunc", cmds[i]), "%s: status %d stderr %s; want the runtime, args untouched",
		      cmds[i][0], r.status, r.err);
		CHECK(muxd_untouched(&m), "%s: muxd was called", cmds[i][0]);
		muxd_done(&m);
		done(&r);
	}
}

/* to_wrapper runs muxflow-runtime and expects it to hand everything over
 * to muxflow-wrapper untouched. */
static void to_wrapper(const char *name, const char *policy, const char *config, const char *const *args_in,
		       void (*prepare)(struct env *))
{
	struct env e;
	struct muxd m;
	const char *args[16];
	setup(&e, name, policy, config, config ? strlen(config) : 0);
	int i = 0;
	for (; args_in[i]; i++)
		args[i] = strcmp(args_in[i], "BUNDLE") == 0 ? e.bundle : args_in[i];
	args[i] = NULL;
	if (prepare)
		prepare(&e);
	muxd_start(&m, &e, 0, NULL);
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(r.status == 0 && ran(&e, "muxflow-wrapper", args), "%s: status %d stderr %s; want the wrapper", name,
	      r.status, r.err);
	CHECK(!exists(P("%s/fakerunc.argv", e.out)), "%s: the runtime ran", name);
	CHECK(muxd_untouched(&m), "%s: muxd was called", name);
	muxd_done(&m);
	done(&r);
}

static void missing_policy(struct env *e) { e->policy_env = P("%s/nothere.toml", e->dir); }

static void self_in_path(struct env *e)
{
	CHECK(symlink(P("%s/muxflow-runtime", e->bin), P("%s/runc", e->path)) == 0, "symlink");
}

static void symlinked_config(struct env *e)
{
	write_file(P("%s/outside.json", e->dir), plain, plain_len, 0644);
	CHECK(symlink(P("%s/outside.json", e->dir), P("%s/config.json", e->bundle)) == 0, "symlink");
}

static void test_wrapper_cases(void)
{
	const char *create[] = {"create", "--bundle", "BUNDLE", "c1", NULL};
	const char *state[] = {"state", "c1", NULL};
	to_wrapper("unsure-create", "hook.runtime = \"fakerunc\"\n", plain, create, NULL);
	to_wrapper("unsure-state", "[hook]\nruntime = \"a\"\nruntime = \"b\"\n", plain, state, NULL);
	to_wrapper("unsure-gpu", "[node]\nsocket = 'SOCK'\n[hook]\ntimeout = \"2 s\"\n", gpu_spec, create, NULL);
	to_wrapper("missing-policy", POLICY, plain, state, missing_policy);
	to_wrapper("runtime-is-self", "[hook]\nruntime = \"BIN/muxflow-runtime\"\n", plain, state, NULL);
	to_wrapper("runtime-is-self-in-path", "[hook]\nruntime = \"runc\"\n", plain, create, self_in_path);
	to_wrapper("runtime-is-wrapper", "[hook]\nruntime = \"BIN/muxflow-wrapper\"\n", plain, state, NULL);
	to_wrapper("runtime-missing", "[hook]\nruntime = \"nosuchrunc\"\n", plain, state, NULL);
	to_wrapper("symlinked-config", POLICY, NULL, create, symlinked_config);
	to_wrapper("no-config", POLICY, NULL, create, NULL);
	const char *crun_config[] = {"create", "--config", "/elsewhere.json", "--bundle", "BUNDLE", "c1", NULL};
	to_wrapper("crun-config", POLICY, plain, crun_config, NULL);
	const char *no_id[] = {"create", "--bundle", "BUNDLE", NULL};
	to_wrapper("no-id", POLICY, plain, no_id, NULL);
	const char *dangling[] = {"--root", NULL};
	to_wrapper("dangling-flag", POLICY, plain, dangling, NULL);
	char longsock[200] = "[node]\nsocket = \"/tmp/";
	memset(longsock + strlen(longsock), 'a', 110);
	strcat(longsock, "\"\n[hook]\nruntime = \"fakerunc\"\n");
	to_wrapper("socket-too-long", longsock, gpu_spec, create, NULL);
}

static void test_no_wrapper(void)
{
	struct env e;
	setup(&e, "no-wrapper", "hook.runtime = 'x'\n", plain, plain_len);
	unlink(P("%s/muxflow-wrapper", e.bin));
	const char *args[] = {"--log", e.log, "--log-format", "json", "create", "--bundle", e.bundle, "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	char *want = P("muxflow-runtime: %s/muxflow-wrapper is not installed next to muxflow-runtime; reinstall muxflow\n",
		       e.realbin);
	CHECK(r.status == 1 && r.err && strcmp(r.err, want) == 0, "no wrapper: status %d stderr %s", r.status, r.err);
	size_t len;
	char *log = read_file(e.log, &len);
	want[strlen(want) - 1] = '\0';
	CHECK(log && strncmp(log, "{\"level\":\"error\",\"msg\":\"", 24) == 0 && strstr(log, want) &&
	      strstr(log, "\",\"time\":\"") && strcmp(log + len - 4, "Z\"}\n") == 0, "no wrapper: log %s", log);
	free(log);
	done(&r);
}

static void test_default_policy_path(void)
{
	struct env e;
	if (exists("/etc/muxflow/policy.toml")) {
		printf("progtest: /etc/muxflow/policy.toml exists; skipping the no-policy case\n");
		return;
	}
	setup(&e, "no-policy-file", POLICY, plain, plain_len);
	e.policy_env = NULL;
	copy(fakert, P("%s/runc", e.path));
	const char *args[] = {"state", "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(r.status == 0 && ran(&e, "runc", args), "no policy file: status %d stderr %s; want runc from PATH",
	      r.status, r.err);
	done(&r);
}

static void test_timeout(void)
{
	struct env e;
	struct muxd m;
	struct answer a[] = {{NULL, 0}, ANSWER("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")};
	setup(&e, "timeout", "[node]\nsocket = \"SOCK\"\n[hook]\nruntime = \"fakerunc\"\ntimeout = \"300ms\"\n",
	      gpu_spec, sizeof gpu_spec - 1);
	muxd_start(&m, &e, 2, a);
	const char *args[] = {"create", "--bundle", e.bundle, "c/1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "timeout: muxd did not get the create and the delete");
	CHECK(r.status == 1 && r.err && strstr(r.err, "muxflow-runtime: muxd did not answer the create request for container c/1 within 300ms"),
	      "timeout: status %d stderr %s", r.status, r.err);
	CHECK(r.secs >= 0.29 && r.secs < 2.5, "timeout: took %.3f s", r.secs);
	const char del[] = "DELETE /v1/containers/c%2F1 HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n\r\n";
	CHECK(file_is(P("%s/req.1", e.dir), del, sizeof del - 1), "timeout: no DELETE after the failed create");
	CHECK(ran_nothing(&e), "timeout: something ran");
	done(&r);
}

static void test_malformed(void)
{
	static const struct { const char *name, *raw, *want; } cases[] = {
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding"},
		{"truncated", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "cut short"},
		{"garbage", "hello\r\n\r\n", "bad status line"},
		{"empty 200", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "without a config.json"},
		{"silence", "", "it was empty"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct env e;
		struct muxd m;
		struct answer a[] = {{cases[i].raw, strlen(cases[i].raw)},
				     ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
		setup(&e, P("malformed%zu", i), POLICY, gpu_spec, sizeof gpu_spec - 1);
		muxd_start(&m, &e, 2, a);
		const char *args[] = {"create", "--bundle", e.bundle, "c1", NULL};
		struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
		CHECK(muxd_done(&m), "%s: muxd did not get the create and the delete", cases[i].name);
		CHECK(r.status == 1 && r.err && strstr(r.err, "muxflow-runtime: muxd's answer to the create request was malformed: ") &&
		      strstr(r.err, cases[i].want), "%s: status %d stderr %s", cases[i].name, r.status, r.err);
		CHECK(exists(P("%s/req.1", e.dir)), "%s: no DELETE", cases[i].name);
		CHECK(ran_nothing(&e) && config_is(&e, gpu_spec, sizeof gpu_spec - 1), "%s: ran or changed", cases[i].name);
		done(&r);
	}
}

static void test_exec_fails_after_200(void)
{
	struct env e;
	struct muxd m;
	char answer[1024];
	int n = snprintf(answer, sizeof answer, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n%s", sizeof wired_spec - 1,
			 wired_spec);
	struct answer a[] = {{answer, (size_t)n}, ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
	setup(&e, "exec-fails", POLICY, gpu_spec, sizeof gpu_spec - 1);
	/* Executable, but its interpreter does not exist: execv fails. */
	write_file(P("%s/fakerunc", e.path), "#!/nonexistent/interpreter\n", 27, 0755);
	muxd_start(&m, &e, 2, a);
	const char *args[] = {"--log", e.log, "--log-format", "json", "create", "--bundle", e.bundle, "id 1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "exec fails: muxd did not get the create and the delete");
	CHECK(r.status == 1 && r.err && strstr(r.err, P("muxflow-runtime: exec %s/fakerunc: No such file or directory", e.path)),
	      "exec fails: status %d stderr %s", r.status, r.err);
	const char del[] = "DELETE /v1/containers/id%201 HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n\r\n";
	CHECK(file_is(P("%s/req.1", e.dir), del, sizeof del - 1), "exec fails: no DELETE");
	CHECK(config_is(&e, gpu_spec, sizeof gpu_spec - 1), "exec fails: config.json not restored");
	size_t len;
	char *log = read_file(e.log, &len);
	CHECK(log && strstr(log, "\"level\":\"info\",\"msg\":\"muxflow: GPU container wired\"") &&
	      strstr(log, "{\"level\":\"error\",\"msg\":\"muxflow-runtime: exec "), "exec fails: log %s", log);
	free(log);
	done(&r);
}

static void test_backslash_goes_to_muxd(void)
{
	struct env e;
	struct muxd m;
	struct answer a[] = {ANSWER("HTTP/1.1 204 No Content\r\n\r\n")};
	const char spec[] = "{\"process\":{\"env\":[\"A=\\u0041\"]}}";
	setup(&e, "backslash", POLICY, spec, sizeof spec - 1);
	muxd_start(&m, &e, 1, a);
	const char *args[] = {"create", "--bundle", e.bundle, "c1", NULL};
	struct result r = run(&e, "muxflow-runtime", args, NULL, 0);
	CHECK(muxd_done(&m), "backslash: muxd was not asked");
	CHECK(r.status == 0 && ran(&e, "fakerunc", args), "backslash: status %d stderr %s", r.status, r.err);
	done(&r);
}

/* ---- muxflow-hook ---- */

static const char state_doc[] =
	"{\"ociVersion\":\"1.2.0\",\"id\":\"c1\",\"status\":\"creating\",\"pid\":4242,\"bundle\":\"/b\","
	"\"annotations\":{\"a\":\"\\u00e9\"}}";

static void hook_case(const char *name, const char *const *args, const char *in, size_t inlen, int nanswers,
		      struct answer *answers, int want_status, const char *want_err, const char *want_req, size_t req_len)
{
	struct env e;
	struct muxd m;
	const char *argv[16];
	setup(&e, name, POLICY, NULL, 0);
	int i = 0;
	for (; args[i]; i++)
		argv[i] = strcmp(args[i], "SOCK") == 0 ? e.sock : strncmp(args[i], "--socket=SOCK", 13) == 0
			? P("--socket=%s", e.sock) : args[i];
	argv[i] = NULL;
	if (nanswers >= 0)
		muxd_start(&m, &e, nanswers, answers);
	struct result r = run(&e, "muxflow-hook", argv, in, inlen);
	if (nanswers > 0)
		CHECK(muxd_done(&m), "%s: muxd was not called", name);
	else if (nanswers == 0) {
		CHECK(muxd_untouched(&m), "%s: muxd was called", name);
		muxd_done(&m);
	}
	char *werr = want_err ? replace_all(want_err, "SOCK", e.sock) : NULL;
	CHECK(r.status == want_status, "%s: status %d, want %d; stderr %s", name, r.status, want_status, r.err);
	if (werr)
		CHECK(r.err && strstr(r.err, werr), "%s: stderr \"%s\", want \"%s\"", name, r.err, werr);
	else
		CHECK(r.errlen == 0, "%s: stderr \"%s\"", name, r.err);
	if (want_req)
		CHECK(file_is(P("%s/req.0", e.dir), want_req, req_len), "%s: request differs", name);
	free(werr);
	done(&r);
}

static void test_hook(void)
{
	char req[4096];
	int n;
	struct answer ok[] = {ANSWER("HTTP/1.1 204 No Content\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\n\r\n")};

	n = snprintf(req, sizeof req, "POST /v1/runtime/hooks/create-runtime HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			"Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", sizeof state_doc - 1, state_doc);
	hook_case("hook-create", (const char *[]){"create-runtime", "--socket", "SOCK", NULL}, state_doc,
		  sizeof state_doc - 1, 1, ok, 0, NULL, req, (size_t)n);
	n = snprintf(req, sizeof req, "POST /v1/runtime/hooks/poststop HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			"Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", sizeof state_doc - 1, state_doc);
	hook_case("hook-poststop", (const char *[]){"poststop", "--socket=SOCK", "--timeout=1.5s", NULL}, state_doc,
		  sizeof state_doc - 1, 1, ok, 0, NULL, req, (size_t)n);
	hook_case("hook-single-dash", (const char *[]){"poststop", "-timeout", "1m30s", "-socket", "SOCK", NULL},
		  state_doc, sizeof state_doc - 1, 1, ok, 0, NULL, req, (size_t)n);
	hook_case("hook-poststop-down", (const char *[]){"poststop", "--socket", "SOCK", NULL}, state_doc,
		  sizeof state_doc - 1, -1, NULL, 0,
		  "muxflow-hook: muxd is not running; it will drop the container when it restarts\n", NULL, 0);
	hook_case("hook-create-down", (const char *[]){"create-runtime", "--socket", "SOCK", NULL}, state_doc,
		  sizeof state_doc - 1, -1, NULL, 1,
		  "muxflow-hook: cannot report the container to muxd: muxd is not running (no answer on SOCK)\n", NULL, 0);

	struct answer refused[] = {ANSWER("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
					  "Content-Length: 29\r\n\r\ncontainer state: pid -1 bad\n\n")};
	hook_case("hook-refused", (const char *[]){"create-runtime", "--socket", "SOCK", NULL}, state_doc,
		  sizeof state_doc - 1, 1, refused, 1, "muxflow-hook create-runtime: container state: pid -1 bad\n", NULL, 0);
	struct answer silent[] = {{NULL, 0}};
	hook_case("hook-timeout", (const char *[]){"create-runtime", "--socket", "SOCK", "--timeout", "200ms", NULL},
		  state_doc, sizeof state_doc - 1, 1, silent, 1,
		  "muxflow-hook create-runtime: muxd did not answer within 200ms (socket SOCK)\n", NULL, 0);
	struct answer chunked[] = {ANSWER("HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n")};
	hook_case("hook-malformed", (const char *[]){"poststop", "--socket", "SOCK", NULL}, state_doc,
		  sizeof state_doc - 1, 1, chunked, 1, "muxflow-hook poststop: muxd's answer was malformed: it used Transfer-Encoding", NULL, 0);

	/* Sizes: 1 MiB is forwarded whole, one byte more is refused. */
	static char big[(1 << 20) + 1];
	memset(big, ' ', sizeof big);
	big[0] = '{';
	big[(1 << 20) - 1] = '}';
	static char bigreq[(1 << 20) + 512];
	n = snprintf(bigreq, 512, "POST /v1/runtime/hooks/poststop HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n");
	memcpy(bigreq + n, big, 1 << 20);
	hook_case("hook-1MiB", (const char *[]){"poststop", "--socket", "SOCK", NULL}, big, 1 << 20, 1, ok, 0, NULL,
		  bigreq, (size_t)n + (1 << 20));
	hook_case("hook-oversized", (const char *[]){"poststop", "--socket", "SOCK", NULL}, big, sizeof big, 0, NULL, 1,
		  "muxflow-hook poststop: container state is larger than 1048576 bytes\n", NULL, 0);

	/* Command lines refused before anything is read or sent. */
	static const struct { const char *name; const char *args[6]; const char *err; } bad[] = {
		{"hook-bad-duration", {"poststop", "--socket", "SOCK", "--timeout", "abc"}, "muxflow-hook: --timeout \"abc\" is not a duration"},
		{"hook-negative-duration", {"poststop", "--socket", "SOCK", "--timeout=-1s"}, "muxflow-hook: --timeout must be above zero, got \"-1s\""},
		{"hook-zero-duration", {"poststop", "--timeout", "0", "--socket", "SOCK"}, "muxflow-hook: --timeout must be above zero"},
		{"hook-empty-duration", {"poststop", "--timeout="}, "muxflow-hook: --timeout \"\" is not a duration"},
		{"hook-unknown-command", {"prestart", "--socket", "SOCK"}, "muxflow-hook: unknown command \"prestart\""},
		{"hook-no-command", {NULL}, "muxflow-hook: usage: muxflow-hook create-runtime|poststop"},
		{"hook-flag-first", {"--socket", "SOCK", "poststop"}, "muxflow-hook: unknown command \"--socket\""},
		{"hook-unknown-flag", {"poststop", "--sock", "SOCK"}, "muxflow-hook: unknown flag --sock"},
		{"hook-extra-arg", {"poststop", "--socket", "SOCK", "extra"}, "muxflow-hook: unexpected argument \"extra\""},
		{"hook-after-dashes", {"poststop", "--", "x"}, "muxflow-hook: unexpected argument \"x\""},
		{"hook-missing-value", {"poststop", "--socket"}, "muxflow-hook: flag --socket needs a value"},
		{"hook-bad-syntax", {"poststop", "---socket=x"}, "muxflow-hook: bad flag syntax: ---socket=x"},
		{"hook-empty-socket", {"poststop", "--socket="}, "muxflow-hook: --socket must name"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		hook_case(bad[i].name, bad[i].args, state_doc, sizeof state_doc - 1, 0, NULL, 1, bad[i].err, NULL, 0);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: progtest BINDIR FAKERUNTIME PLAIN_SPEC_JSON\n");
		return 2;
	}
	src_bin = argv[1];
	fakert = argv[2];
	plain = read_file(argv[3], &plain_len);
	if (!plain || !mkdtemp(root)) {
		perror("progtest");
		return 2;
	}
	umask(022);
	signal(SIGPIPE, SIG_IGN);
	test_non_gpu_create();
	test_gpu_create_204();
	test_gpu_create_200();
	test_gpu_create_201();
	test_gpu_create_reports_pid();
	test_gpu_create_runtime_fails_early();
	test_gpu_create_refused();
	test_muxd_down();
	test_other_commands();
	test_wrapper_cases();
	test_no_wrapper();
	test_default_policy_path();
	test_timeout();
	test_malformed();
	test_exec_fails_after_200();
	test_backslash_goes_to_muxd();
	test_hook();
	if (!getenv("PROGTEST_KEEP")) {
		char cmd[128];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
		if (system(cmd) != 0)
			check_failures++;
	}
	free(plain);
	if (check_failures) {
		fprintf(stderr, "progtest %s: %d failures\n", src_bin, check_failures);
		return 1;
	}
	printf("progtest %s: ok\n", src_bin);
	return 0;
}
