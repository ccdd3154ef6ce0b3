/* policyscan.h: the three policy values the runtime's fast path needs,
 * found without a TOML decoder. */
#ifndef MUXFLOW_POLICYSCAN_H
#define MUXFLOW_POLICYSCAN_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define POLICY_ENV "MUXFLOW_POLICY"
#define POLICY_DEFAULT_PATH "/etc/muxflow/policy.toml"
#define POLICY_DEFAULT_RUNTIME "runc"
#define POLICY_DEFAULT_SOCKET "/run/muxflow/muxd.sock"
#define POLICY_DEFAULT_TIMEOUT "2s"
#define POLICY_MAX_SIZE (1 << 20)
/* The policy's own validation bounds hook.timeout to (0, 1m]. */
#define POLICY_MAX_TIMEOUT_NS 60000000000LL

#define POLICY_MAX_TIMEOUT_TEXT 64

struct policy {
	const char *runtime; /* [hook] runtime: a name in PATH or a path */
	const char *socket;  /* [node] socket: muxd's unix socket */
	const char *timeout; /* [hook] timeout as written */
	int64_t timeout_ns;
	/* The values read, one after another: on the fast path every page
	 * first touched costs more than the whole scan, so they are packed
	 * rather than each in an array of its own. Not to be copied. */
	size_t used;
	char store[2 * PATH_MAX + POLICY_MAX_TIMEOUT_TEXT];
};

void policy_defaults(struct policy *p);

/* policy_scan reads doc[0..len). 0: sure, p holds the values (defaults for
 * absent keys). -1: unsure; the caller hands over to the Go wrapper, whose
 * decoder reports what is wrong. */
int policy_scan(const char *doc, size_t len, struct policy *p);

/* policy_load reads the policy named by env (MUXFLOW_POLICY's value, NULL
 * when unset) or the default path, and scans it. */
int policy_load(const char *env, struct policy *p);

#endif
