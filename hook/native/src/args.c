/* args.c: reads a runc/crun command line exactly as the Go wrapper does
 * (hook/wrapper/args.go), so that the C and Go stages agree on which words
 * are the subcommand, the bundle and the container id. */
#include "args.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Flags of runc and crun that take a value. Knowing them is how the
 * subcommand and the container id are told apart from flag values; a flag
 * not listed is boolean unless written --flag=value. */
static const char *const value_flags[] = {
	/* global */
	"log", "log-format", "log-level", "root", "criu", "rootless", "cgroup-manager",
	/* create / run */
	"bundle", "b", "console-socket", "pid-file", "preserve-fds",
	"config", "f", /* crun only */
	NULL,
};

static bool name_is(const char *name, size_t n, const char *want)
{
	return strlen(want) == n && memcmp(name, want, n) == 0;
}

static bool is_value_flag(const char *name, size_t n)
{
	for (const char *const *f = value_flags; *f; f++)
		if (name_is(name, n, *f))
			return true;
	return false;
}

void path_clean(const char *path, char *out)
{
	size_t n = strlen(path), w = 0, r = 0, dotdot = 0;
	bool rooted;

	if (n == 0) {
		strcpy(out, ".");
		return;
	}
	rooted = path[0] == '/';
	if (rooted) {
		out[w++] = '/';
		r = dotdot = 1;
	}
	while (r < n) {
		if (path[r] == '/') {
			r++;
		} else if (path[r] == '.' && (r + 1 == n || path[r + 1] == '/')) {
			r++;
		} else if (path[r] == '.' && path[r + 1] == '.' && (r + 2 == n || path[r + 2] == '/')) {
			r += 2;
			if (w > dotdot) {
				w--;
				while (w > dotdot && out[w] != '/')
					w--;
			} else if (!rooted) {
				if (w > 0)
					out[w++] = '/';
				out[w++] = '.';
				out[w++] = '.';
				dotdot = w;
			}
		} else {
			if ((rooted && w != 1) || (!rooted && w != 0))
				out[w++] = '/';
			for (; r < n && path[r] != '/'; r++)
				out[w++] = path[r];
		}
	}
	if (w == 0)
		out[w++] = '.';
	out[w] = '\0';
}

/* resolve_bundle writes the absolute, clean bundle into out (PATH_MAX
 * bytes). Cleaning never lengthens a rooted path, so a joined path under
 * PATH_MAX fits; the buffers are sized to the path because each page the
 * fast path touches first costs more than the work done in it. */
static int bundle_too_long(char *err, size_t errlen)
{
	snprintf(err, errlen, "the bundle path is longer than %d bytes", PATH_MAX - 1);
	return -1;
}

static int resolve_bundle(const char *bundle, const char *cwd, char *out, char *err, size_t errlen)
{
	size_t bl, cl;

	if (bundle[0] == '\0')
		bundle = ".";
	bl = strlen(bundle);
	if (bundle[0] == '/') {
		if (bl >= PATH_MAX)
			return bundle_too_long(err, errlen);
		path_clean(bundle, out);
		return 0;
	}
	if (!cwd) {
		if (!getcwd(out, PATH_MAX)) {
			snprintf(err, errlen, "cannot resolve the bundle %s: no working directory", bundle);
			return -1;
		}
		cwd = out;
	}
	cl = strlen(cwd);
	if (cl + 1 + bl >= PATH_MAX)
		return bundle_too_long(err, errlen);
	char joined[cl + bl + 2];
	memcpy(joined, cwd, cl);
	joined[cl] = '/';
	memcpy(joined + cl + 1, bundle, bl + 1);
	path_clean(joined, out);
	return 0;
}

int parse_args(int argc, char *const *args, const char *cwd,
	       struct invocation *inv, char *err, size_t errlen)
{
	const char *bundle = "";
	const char *first = NULL; /* first positional argument */
	int npos = 0;

	inv->command = inv->log = inv->log_format = inv->config = inv->pid_file = inv->id = "";
	inv->command_at = -1;
	inv->bundle[0] = '\0';
	if (errlen)
		err[0] = '\0';

	for (int i = 0; i < argc; i++) {
		const char *a = args[i];
		if (strcmp(a, "--") == 0) {
			if (i + 1 < argc && !first)
				first = args[i + 1];
			npos += argc - (i + 1);
			break;
		}
		if (a[0] != '-' || strcmp(a, "-") == 0) {
			if (inv->command[0] == '\0') {
				inv->command = a;
				inv->command_at = i;
				continue;
			}
			if (!first)
				first = a;
			npos++;
			continue;
		}
		const char *name = a;
		while (*name == '-')
			name++;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const char *val = eq ? eq + 1 : NULL;
		if (!val && is_value_flag(name, nlen)) {
			if (i + 1 >= argc) {
				snprintf(err, errlen, "flag %s needs a value", a);
				return -1;
			}
			val = args[++i];
		}
		if (!val)
			continue;
		if (name_is(name, nlen, "log"))
			inv->log = val;
		else if (name_is(name, nlen, "log-format"))
			inv->log_format = val;
		else if (name_is(name, nlen, "bundle") || name_is(name, nlen, "b"))
			bundle = val;
		else if (name_is(name, nlen, "config") || name_is(name, nlen, "f"))
			inv->config = val;
		else if (name_is(name, nlen, "pid-file"))
			inv->pid_file = val;
	}
	if (strcmp(inv->command, "create") != 0 && strcmp(inv->command, "run") != 0)
		return 0;
	if (npos != 1) {
		snprintf(err, errlen, "%s needs exactly one container id, got %d arguments", inv->command, npos);
		return -1;
	}
	inv->id = first;
	return resolve_bundle(bundle, cwd, inv->bundle, err, errlen);
}
