/* bench.c: start-up cost of muxflow-runtime's fast path. It starts each
 * program many times with posix_spawn + wait4, rounds interleaved so that
 * drift in the machine's speed hits every case alike, and prints medians.
 *
 * usage: bench RUNS TRIVIAL FLOOR RUNTIME_STATIC RUNTIME_DYNAMIC POLICY SPEC
 * TRIVIAL also stands in for the real runtime ("runc" in PATH); FLOOR only
 * execs it; POLICY and SPEC are a policy file and a config.json to use. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

enum { TRIVIAL, DIRECT, FLOOR, STATIC_CREATE, DYNAMIC_CREATE, STATIC_STATE, NCASES };

int main(int argc, char **argv)
{
	static const char *names[NCASES] = {
		"trivial static program", "runtime directly (create)",
		"exec-only static-pie program, then runtime",
		"muxflow-runtime static-pie, non-GPU create", "muxflow-runtime dynamic PIE, non-GPU create",
		"muxflow-runtime static-pie, state",
	};
	char dir[] = "/tmp/muxbench.XXXXXX", pathdir[64], runc[128], bundle[64], cfg[128];
	char envpath[512], envpol[4200], envrt[160], pidfile[128];
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
	mkdir(pathdir, 0755);
	mkdir(bundle, 0755);
	copy(argv[2], runc, 0755);
	copy(argv[7], cfg, 0644);
	snprintf(envpath, sizeof envpath, "PATH=%s:/usr/bin:/bin", pathdir);
	snprintf(envpol, sizeof envpol, "MUXFLOW_POLICY=%s", argv[6]);
	snprintf(envrt, sizeof envrt, "MUXBENCH_RUNTIME=%s", runc);
	char *envp[] = {envpath, envpol, envrt, NULL};

	char *create[] = {"x", "--root", "/run/containerd/runc/k8s.io", "--log", "/dev/null",
			  "--log-format", "json", "create", "--bundle", bundle, "--pid-file", pidfile,
			  "c1", NULL};
	char *state[] = {"x", "--root", "/run/containerd/runc/k8s.io", "state", "c1", NULL};
	char *bare[] = {"trivial", NULL};
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
	}
	double med[NCASES];
	for (int c = 0; c < NCASES; c++) {
		qsort(t[c], (size_t)runs, sizeof(double), cmp);
		med[c] = t[c][runs / 2];
		printf("%-46s median %7.0f us  (p10 %5.0f, p90 %5.0f)\n", names[c], med[c],
		       t[c][runs / 10], t[c][runs * 9 / 10]);
	}
	printf("over exec'ing the runtime directly: fast path static-pie %+.0f us, dynamic PIE %+.0f us;"
	       " exec-only floor %+.0f us\n",
	       med[STATIC_CREATE] - med[DIRECT], med[DYNAMIC_CREATE] - med[DIRECT], med[FLOOR] - med[DIRECT]);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : 1;
}
