/* bench.c: start-up cost of muxflow-runtime's fast path. It starts each
 * program many times with posix_spawn + wait4, rounds interleaved so that
 * drift in the machine's speed hits every case alike, and prints medians.
 *
 * usage: bench RUNS TRIVIAL FLOOR RUNTIME_STATIC RUNTIME_DYNAMIC POLICY SPEC
 * TRIVIAL also stands in for the real runtime ("runc" in PATH); FLOOR only
 * execs it; POLICY and SPEC are a policy file and a config.json to use;
 * the GPU case adds NVIDIA_VISIBLE_DEVICES to SPEC and a fake muxd. */
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double run(const char *path, char *const argv[], char *const envp[])
{
	pid_t pid;
	int st;
	double t0 = now_us();
	if (posix_spawn(&pid, path, NULL, NULL, argv, envp) != 0) {
		perror(path);
		exit(1);
	}
	if (wait4(pid, &st, 0, NULL) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "bench: %s failed (status %d)\n", path, st);
		exit(1);
	}
	return now_us() - t0;
}

/* fake_muxd answers every request on path with 204 once it has read the
 * request's head and body, as muxd does for a spec it leaves alone. */
static pid_t fake_muxd(const char path[64])
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	if (l < 0 || bind(l, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(l, 64) != 0) {
		perror("bench: fake muxd");
		exit(1);
	}
	pid_t pid = fork();
	if (pid != 0) {
		close(l);
		return pid;
	}
	static char buf[1 << 20];
	for (;;) {
		int c = accept(l, NULL, NULL);
		size_t got = 0, want = 0;
		ssize_t r;
		while (c >= 0 && (r = recv(c, buf + got, sizeof buf - got, 0)) > 0) {
			got += (size_t)r;
			char *end = memmem(buf, got, "\r\n\r\n", 4);
			char *cl = memmem(buf, got, "Content-Length: ", 16);
			if (end) { /* a DELETE has no body and no Content-Length */
				want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 16, NULL, 10) : 0);
				if (got >= want)
					break;
			}
		}
		/* Containers g200 and g201 get their spec back as muxd's wired one,
		 * with 200 (the runtime forks its pid reporter) or 201 (muxd watches
		 * the pid file): the cost of the reporter. */
		char *eol = memchr(buf, '\n', got);
		int code = 204;
		if (eol && memmem(buf, (size_t)(eol - buf), "id=g200&", 8))
			code = 200;
		else if (eol && memmem(buf, (size_t)(eol - buf), "id=g201&", 8))
			code = 201;
		char head[128];
		char *body = memmem(buf, got, "\r\n\r\n", 4);
		size_t blen = code != 204 && body ? got - (size_t)(body + 4 - buf) : 0;
		int hn = code == 204 ? snprintf(head, sizeof head, "HTTP/1.1 204 No Content\r\n\r\n")
				     : snprintf(head, sizeof head, "HTTP/1.1 %d OK\r\nContent-Length: %zu\r\n\r\n", code, blen);
		if (c >= 0 && (write(c, head, (size_t)hn) < 0 || (blen && write(c, body + 4, blen) < 0)))
			_exit(1);
		close(c);
	}
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void copy(const char *from, const char *to, mode_t mode)
{
	char cmd[4096];
	snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod %o '%s'", from, to, mode, to);
	if (system(cmd) != 0)
		exit(1);
}

enum { TRIVIAL, DIRECT, FLOOR, STATIC_CREATE, DYNAMIC_CREATE, STATIC_STATE, GPU_CREATE, GPU_200, GPU_201, NCASES };

int main(int argc, char **argv)
{
	static const char *names[NCASES] = {
		"trivial static program", "runtime directly (create)",
		"exec-only static-pie program, then runtime",
		"muxflow-runtime static-pie, non-GPU create", "muxflow-runtime dynamic PIE, non-GPU create",
		"muxflow-runtime static-pie, state",
		"muxflow-runtime static-pie, GPU create, muxd 204",
		"  GPU create, muxd 200 + spec (pid reporter)",
		"  GPU create, muxd 201 + spec (muxd watches)",
	};
	char dir[] = "/tmp/muxbench.XXXXXX", pathdir[64], runc[128], bundle[64], cfg[128];
	char envpath[512], envpol[4200], envrt[160], pidfile[128], gbundle[64], gcfg[128], gpol[128], sock[64];
	if (argc != 8) {
		fprintf(stderr, "usage: bench RUNS TRIVIAL FLOOR RUNTIME_STATIC RUNTIME_DYNAMIC POLICY SPEC\n");
		return 2;
	}
	int runs = atoi(argv[1]);
	if (runs < 1 || !mkdtemp(dir))
		return 2;
	snprintf(pathdir, sizeof pathdir, "%s/path", dir);
	snprintf(bundle, sizeof bundle, "%s/bundle", dir);
	snprintf(runc, sizeof runc, "%s/runc", pathdir);
	snprintf(cfg, sizeof cfg, "%s/config.json", bundle);
	snprintf(pidfile, sizeof pidfile, "%s/init.pid", bundle);
	snprintf(gbundle, sizeof gbundle, "%s/gpu", dir);
	snprintf(gcfg, sizeof gcfg, "%s/config.json", gbundle);
	snprintf(gpol, sizeof gpol, "%s/policy.toml", dir);
	snprintf(sock, sizeof sock, "%s/muxd.sock", dir);
	mkdir(pathdir, 0755);
	mkdir(bundle, 0755);
	copy(argv[2], runc, 0755);
	copy(argv[7], cfg, 0644);
	/* The GPU case: the same spec asking for GPU 0, a policy naming the
	 * fake muxd's socket. */
	mkdir(gbundle, 0755);
	{
		char cmd[1024], pol[512];
		snprintf(cmd, sizeof cmd, "sed 's/\"PATH=/\"NVIDIA_VISIBLE_DEVICES=0\",\"PATH=/' '%s' > '%s'", argv[7], gcfg);
		if (system(cmd) != 0)
			exit(1);
		int n = snprintf(pol, sizeof pol, "[node]\nsocket = \"%s\"\n[hook]\nruntime = \"runc\"\n", sock);
		FILE *f = fopen(gpol, "w");
		if (!f || fwrite(pol, 1, (size_t)n, f) != (size_t)n || fclose(f) != 0)
			exit(1);
	}
	pid_t muxd = fake_muxd(sock);
	char envgpol[200];
	snprintf(envgpol, sizeof envgpol, "MUXFLOW_POLICY=%s", gpol);
	char *genvp[] = {envpath, envgpol, NULL};
	snprintf(envpath, sizeof envpath, "PATH=%s:/usr/bin:/bin", pathdir);
	snprintf(envpol, sizeof envpol, "MUXFLOW_POLICY=%s", argv[6]);
	snprintf(envrt, sizeof envrt, "MUXBENCH_RUNTIME=%s", runc);
	char *envp[] = {envpath, envpol, envrt, NULL};

	char *create[] = {"x", "--root", "/run/containerd/runc/k8s.io", "--log", "/dev/null",
			  "--log-format", "json", "create", "--bundle", bundle, "--pid-file", pidfile,
			  "c1", NULL};
	char *state[] = {"x", "--root", "/run/containerd/runc/k8s.io", "state", "c1", NULL};
	char *bare[] = {"trivial", NULL};
	char *gcreate[] = {"x", "--root", "/run/containerd/runc/k8s.io", "create", "--bundle", gbundle, "g1", NULL};
	char *g200[] = {"x", "--root", "/run/containerd/runc/k8s.io", "create", "--bundle", gbundle, "g200", NULL};
	char *g201[] = {"x", "--root", "/run/containerd/runc/k8s.io", "create", "--bundle", gbundle, "g201", NULL};
	double *t[NCASES];
	for (int c = 0; c < NCASES; c++)
		t[c] = calloc((size_t)runs, sizeof(double));
	for (int i = 0; i < 20; i++) /* warm the page cache */
		run(argv[4], create, envp);
	for (int i = 0; i < runs; i++) {
		t[TRIVIAL][i] = run(argv[2], bare, envp);
		t[DIRECT][i] = run(runc, create, envp);
		t[FLOOR][i] = run(argv[3], create, envp);
		t[STATIC_CREATE][i] = run(argv[4], create, envp);
		t[DYNAMIC_CREATE][i] = run(argv[5], create, envp);
		t[STATIC_STATE][i] = run(argv[4], state, envp);
		t[GPU_CREATE][i] = run(argv[4], gcreate, genvp);
		t[GPU_200][i] = run(argv[4], g200, genvp);
		t[GPU_201][i] = run(argv[4], g201, genvp);
	}
	double med[NCASES];
	for (int c = 0; c < NCASES; c++) {
		qsort(t[c], (size_t)runs, sizeof(double), cmp);
		med[c] = t[c][runs / 2];
		printf("%-48s median %7.0f us  (p10 %5.0f, p90 %5.0f)\n", names[c], med[c],
		       t[c][runs / 10], t[c][runs * 9 / 10]);
	}
	printf("over exec'ing the runtime directly: fast path static-pie %+.0f us, dynamic PIE %+.0f us;"
	       " exec-only floor %+.0f us; GPU create with an instant muxd %+.0f us\n",
	       med[STATIC_CREATE] - med[DIRECT], med[DYNAMIC_CREATE] - med[DIRECT], med[FLOOR] - med[DIRECT],
	       med[GPU_CREATE] - med[DIRECT]);
	printf("GPU create answered with a wired spec: with the pid reporter %+.0f us, with muxd watching %+.0f us\n",
	       med[GPU_200] - med[DIRECT], med[GPU_201] - med[DIRECT]);
	kill(muxd, SIGKILL);
	waitpid(muxd, NULL, 0);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : 1;
}
