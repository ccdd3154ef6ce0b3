/* hook_main.c: muxflow-hook, the OCI hook muxd adds to GPU containers'
 * specs. As a createRuntime hook it hands the container's state (with the
 * host pid, which exists only now) to muxd, which then watches that process
 * and unregisters the container when it exits. As a poststop hook (specs
 * wired by earlier versions have one) it tells muxd the container is gone. It forwards the state document as it came:
 * muxd decodes and checks it, so this program stays small and fast. */
#include "duration.h"
#include "muxdcall.h"
#include "policyscan.h"
#include "report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "muxflow-hook: usage: muxflow-hook create-runtime|poststop --socket PATH [--timeout DURATION] < state.json"

/* Static: untouched pages cost nothing, and real states are under 4 KiB. */
static char state[MUXD_MAX_STATE + 1];
static struct muxd_reply reply;
static char *answer;

static _Noreturn void fail(const char *fmt, ...)
{
	char msg[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	say(msg);
	exit(1);
}

/* flag_name returns the flag's name if a is "-name" or "--name" (with or
 * without "=value", as Go's flag package reads them), else NULL. */
static const char *flag_name(const char *a, size_t *nlen)
{
	const char *name = a + 1;
	if (a[0] != '-' || a[1] == '\0')
		return NULL;
	if (*name == '-')
		name++;
	if (*name == '\0' || *name == '-' || *name == '=')
		fail("muxflow-hook: bad flag syntax: %s", a);
	*nlen = strcspn(name, "=");
	return name;
}

int main(int argc, char **argv)
{
	const char *socket = POLICY_DEFAULT_SOCKET, *timeout = "2s";
	char err[1024], dur[40], target[64];
	int64_t timeout_ns;
	size_t got = 0;
	int i;

	if (argc < 2)
		fail("%s", USAGE);
	const char *cmd = argv[1];
	if (strcmp(cmd, "create-runtime") != 0 && strcmp(cmd, "poststop") != 0)
		fail("muxflow-hook: unknown command \"%s\"; want create-runtime or poststop\n%s", cmd, USAGE);
	for (i = 2; i < argc; i++) {
		const char *a = argv[i];
		size_t nlen;
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		const char *name = flag_name(a, &nlen);
		if (!name)
			break;
		const char **dst;
		if (nlen == 6 && strncmp(name, "socket", 6) == 0)
			dst = &socket;
		else if (nlen == 7 && strncmp(name, "timeout", 7) == 0)
			dst = &timeout;
		else
			fail("muxflow-hook: unknown flag %s\n%s", a, USAGE);
		if (name[nlen] == '=')
			*dst = name + nlen + 1;
		else if (i + 1 < argc)
			*dst = argv[++i];
		else
			fail("muxflow-hook: flag %s needs a value\n%s", a, USAGE);
	}
	if (i < argc)
		fail("muxflow-hook: unexpected argument \"%s\"\n%s", argv[i], USAGE);
	if (socket[0] == '\0')
		fail("muxflow-hook: --socket must name muxd's unix socket");
	if (parse_duration(timeout, strlen(timeout), &timeout_ns) != 0)
		fail("muxflow-hook: --timeout \"%s\" is not a duration like \"2s\" or \"500ms\"", timeout);
	if (timeout_ns <= 0)
		fail("muxflow-hook: --timeout must be above zero, got \"%s\"", timeout);

	for (;;) {
		ssize_t r = read(STDIN_FILENO, state + got, sizeof state - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail("muxflow-hook %s: read container state: %s", cmd, strerror(errno));
		if (r == 0)
			break;
		got += (size_t)r;
		if (got > MUXD_MAX_STATE)
			fail("muxflow-hook %s: container state is larger than %d bytes", cmd, MUXD_MAX_STATE);
	}

	snprintf(target, sizeof target, MUXD_PATH_HOOKS "%s", cmd);
	struct muxd_request req = {.socket = socket, .timeout_ns = timeout_ns, .method = "POST",
				   .target = target, .body = state, .body_len = got};
	bool stop = strcmp(cmd, "poststop") == 0;
	format_duration(timeout_ns, dur);
	switch (muxd_call(&req, &reply, err, sizeof err)) {
	case MUXD_DOWN:
		if (stop) {
			/* muxd forgets containers whose processes are gone when
			 * it comes back; a stop must not fail because it is down. */
			say("muxflow-hook: muxd is not running; it will drop the container when it restarts");
			return 0;
		}
		fail("muxflow-hook: cannot report the container to muxd: muxd is not running (no answer on %s)",
		     socket);
	case MUXD_TOOLONG:
		fail("muxflow-hook %s: the socket path %s is too long for a unix socket", cmd, socket);
	case MUXD_TIMEOUT:
		fail("muxflow-hook %s: muxd did not answer within %s (socket %s)", cmd, dur, socket);
	case MUXD_IOERR:
		fail("muxflow-hook %s: cannot reach muxd at %s: %s", cmd, socket, err);
	case MUXD_MALFORMED:
		fail("muxflow-hook %s: muxd's answer was malformed: %s", cmd, err);
	case MUXD_ANSWERED:
		break;
	}
	if (reply.resp.status == 204)
		return 0;
	answer = sentence(reply.resp.body, reply.resp.body_len);
	if (!answer)
		fail("muxflow-hook %s: muxd answered HTTP %d without saying why", cmd, reply.resp.status);
	fail("muxflow-hook %s: %s", cmd, answer);
}
