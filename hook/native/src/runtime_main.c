/* runtime_main.c: muxflow-runtime, the OCI runtime containerd and Docker
 * run in place of runc. It decides in well under a millisecond whether a
 * command needs muxflow: commands other than create and run, and
 * containers whose spec cannot ask for a GPU, go straight to the real
 * runtime with their command line untouched and nothing written. A GPU
 * container's spec goes to muxd, which answers with the wired spec. Every
 * case this program is not sure about goes to muxflow-wrapper (Go), which
 * handles it fully and reports problems properly. */
#include "args.h"
#include "bundle.h"
#include "duration.h"
#include "execpath.h"
#include "muxdcall.h"
#include "pctenc.h"
#include "pidreport.h"
#include "policyscan.h"
#include "report.h"
#include "runlog.h"
#include "specscan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define WIRED_MSG "muxflow: GPU container wired"

/* Process-wide state lives here rather than on the stack: every path ends
 * in exec or exit, and the leak checker of the test build must see it. */
static struct invocation inv;
static struct policy pol;
static struct config_file cf = {.dirfd = -1};
static struct muxd_reply reply;
static char *target;
static char *refusal; /* muxd's sentence */
static struct pidreport pr;
/* This program's directory, then the runtime's path, in one buffer: the
 * fast path touches its first page only. */
static char paths[2 * PATH_MAX];
static char *const self = paths;
static char *runtime_path = paths + PATH_MAX;

/* fail reports a sentence on stderr and, when the runtime was given --log,
 * as the last error entry of that log, where containerd looks for the
 * runtime's reason; then exits 1. */
static _Noreturn void fail(const char *fmt, ...)
{
	char msg[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	say(msg);
	if (inv.log && inv.log[0])
		runlog_append(inv.log, inv.log_format, "error", msg, NULL);
	exit(1);
}

/* fail_with reports a sentence that is already whole (muxd's). */
static _Noreturn void fail_with(const char *msg)
{
	fail("%s", msg);
}

static _Noreturn void exec_wrapper(char **argv)
{
	char path[PATH_MAX];
	struct stat st;

	if (self_dir(self, PATH_MAX) != 0)
		fail("muxflow-runtime: cannot find its own executable: %s", strerror(errno));
	if (sibling(self, WRAPPER_NAME, path, sizeof path) != 0 || stat(path, &st) != 0 ||
	    !S_ISREG(st.st_mode))
		fail("muxflow-runtime: %s/%s is not installed next to muxflow-runtime; reinstall muxflow",
		     self, WRAPPER_NAME);
	argv[0] = (char *)WRAPPER_NAME;
	execv(path, argv);
	fail("muxflow-runtime: exec %s: %s", path, strerror(errno));
}

/* find_runtime resolves the policy's runtime, or hands the whole command
 * to the wrapper, which reports a missing or looping runtime properly. */
static void find_runtime(char **argv)
{
	if (policy_load(getenv(POLICY_ENV), &pol) != 0)
		exec_wrapper(argv);
	if (self_dir(self, PATH_MAX) != 0)
		self[0] = '\0';
	runtime_path = self + strlen(self) + 1;
	if (resolve_runtime(pol.runtime, self[0] ? self : NULL, runtime_path,
			    (size_t)(paths + sizeof paths - runtime_path)) != 0)
		exec_wrapper(argv);
}

/* exec_runtime returns only on failure, with errno set. */
static void exec_runtime(char **argv)
{
	const char *base = strrchr(runtime_path, '/');
	argv[0] = (char *)(base ? base + 1 : runtime_path);
	execv(runtime_path, argv);
}

/* unregister tells muxd to forget a container it may have registered for
 * a create that then failed here: no process of the container will ever
 * exist for muxd to watch. Best effort, its own deadline. */
static void unregister(void)
{
	muxd_unregister(pol.socket, pol.timeout_ns, inv.id);
}

/* create_target names the container for muxd, with one of: hook, which muxd
 * adds to the spec as the createRuntime hook that reports the pid, or
 * pid_file, the runtime's pid file, which muxd watches itself when it can
 * (then it answers 201 instead of 200). */
static char *create_target(const char *hook, const char *pid_file)
{
	const char *vals[3] = {inv.id, inv.bundle, hook ? hook : pid_file};
	const char *keys[3] = {"?id=", "&bundle=", hook ? "&hook=" : "&pid_file="};
	int nvals = hook || pid_file ? 3 : 2;
	size_t cap = 64, w;
	char *t;

	for (int i = 0; i < nvals; i++)
		cap += 3 * strlen(vals[i]) + strlen(keys[i]);
	if (!(t = malloc(cap)))
		return NULL;
	w = (size_t)sprintf(t, MUXD_PATH_CREATE);
	for (int i = 0; i < nvals; i++) {
		w += (size_t)sprintf(t + w, "%s", keys[i]);
		w += pct_encode(vals[i], strlen(vals[i]), t + w);
	}
	return t;
}

/* with_pid_file returns argv with "--pid-file path" after the command. */
static char **with_pid_file(char **argv, const char *path)
{
	int argc = 0;
	char **out;

	while (argv[argc])
		argc++;
	if (!(out = malloc((size_t)(argc + 3) * sizeof *out)))
		return NULL;
	int at = 1 + inv.command_at + 1; /* argv[0], then args up to the command */
	memcpy(out, argv, (size_t)at * sizeof *out);
	out[at] = (char *)"--pid-file";
	out[at + 1] = (char *)path;
	memcpy(out + at + 2, argv + at, (size_t)(argc - at + 1) * sizeof *out);
	return out;
}

static _Noreturn void gpu_create(char **argv)
{
	char hook[PATH_MAX], err[1024], dur[40];
	bool report_pid;

	find_runtime(argv);
	if (strlen(pol.socket) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		exec_wrapper(argv);
	if (!self[0] || sibling(self, HOOK_NAME, hook, sizeof hook) != 0)
		exec_wrapper(argv);
	/* This program reports the pid itself when it can watch the pid file;
	 * otherwise muxd adds muxflow-hook as the container's createRuntime hook. */
	report_pid = pidreport_prepare(&pr, inv.pid_file, inv.bundle) == 0;
	if (!(target = create_target(report_pid ? NULL : hook, report_pid ? pr.path : NULL)))
		fail("muxflow-runtime: out of memory");
	struct muxd_request req = {.socket = pol.socket, .timeout_ns = pol.timeout_ns,
				   .method = "POST", .target = target,
				   .body = cf.data, .body_len = cf.len};
	format_duration(pol.timeout_ns, dur);
	switch (muxd_call(&req, &reply, err, sizeof err)) {
	case MUXD_DOWN:
	case MUXD_TOOLONG:
		/* The wrapper applies the policy for a node without muxd. */
		exec_wrapper(argv);
	case MUXD_TIMEOUT:
		unregister();
		fail("muxflow-runtime: muxd did not answer the create request for container %s within %s (socket %s)",
		     inv.id, dur, pol.socket);
	case MUXD_IOERR:
		if (reply.connected)
			unregister();
		fail("muxflow-runtime: cannot send the create request for container %s to muxd at %s: %s",
		     inv.id, pol.socket, err);
	case MUXD_MALFORMED:
		unregister();
		fail("muxflow-runtime: muxd's answer to the create request was malformed: %s", err);
	case MUXD_ANSWERED:
		break;
	}

	const struct http_response *resp = &reply.resp;
	if (resp->status == 204) {
		exec_runtime(argv);
		fail("muxflow-runtime: exec %s: %s", runtime_path, strerror(errno));
	}
	if (resp->status == 200 || resp->status == 201) {
		if (resp->body_len == 0) {
			unregister();
			fail("muxflow-runtime: muxd's answer to the create request was malformed: "
			     "a %d answer without a config.json", resp->status);
		}
		/* 201: muxd watches the pid file itself; no reporter. */
		if (report_pid && resp->status == 201) {
			pidreport_release(&pr);
			report_pid = false;
			if (pr.added && !(argv = with_pid_file(argv, pr.path))) {
				unregister();
				fail("muxflow-runtime: out of memory");
			}
		}
		if (config_replace(&cf, resp->body, resp->body_len, err, sizeof err) != 0) {
			unregister();
			fail("muxflow-runtime: %s", err);
		}
		if (inv.log[0])
			runlog_append(inv.log, inv.log_format, "info", WIRED_MSG, inv.id);
		if (report_pid) {
			struct pidreport_target t = {.socket = pol.socket, .timeout_ns = pol.timeout_ns,
						     .id = inv.id, .log = inv.log, .log_format = inv.log_format};
			char **full = pr.added ? with_pid_file(argv, pr.path) : argv;
			if (!full || pidreport_spawn(&pr, &t) != 0) {
				config_replace(&cf, cf.data, cf.len, err, sizeof err);
				unregister();
				fail("muxflow-runtime: cannot start the pid reporter for container %s: %s", inv.id,
				     full ? strerror(errno) : "out of memory");
			}
			argv = full;
		}
		exec_runtime(argv);
		int e = errno;
		char ignored[256];
		if (report_pid)
			pidreport_cancel(&pr);
		/* Put the spec back, so that nothing refers to muxd's wiring
		 * once muxd has forgotten the container. */
		config_replace(&cf, cf.data, cf.len, ignored, sizeof ignored);
		unregister();
		fail("muxflow-runtime: exec %s: %s", runtime_path, strerror(e));
	}
	refusal = sentence(resp->body, resp->body_len);
	if (!refusal)
		fail("muxflow-runtime: muxd refused container %s (HTTP %d) without saying why", inv.id,
		     resp->status);
	fail_with(refusal);
}

int main(int argc, char **argv)
{
	char err[512];

	if (argc < 1 || !argv[0]) {
		say("muxflow-runtime: started without argv[0]");
		return 1;
	}
	if (parse_args(argc - 1, argv + 1, NULL, &inv, err, sizeof err) != 0)
		exec_wrapper(argv);
	if (strcmp(inv.command, "create") == 0 || strcmp(inv.command, "run") == 0) {
		if (inv.config[0])
			exec_wrapper(argv); /* a spec outside the bundle: the wrapper refuses it */
		if (config_open(inv.bundle, &cf) != 0)
			exec_wrapper(argv);
		if (spec_maybe_gpu(cf.data, cf.len))
			gpu_create(argv);
	}
	find_runtime(argv);
	exec_runtime(argv);
	fail("muxflow-runtime: exec %s: %s", runtime_path, strerror(errno));
}
