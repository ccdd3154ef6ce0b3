/* execpath.c: finding the programs muxflow-runtime hands over to. The
 * policy names the real runtime; it must never turn out to be
 * muxflow-runtime itself (containerd configured with our binary as
 * "runc" in PATH, say), which would exec itself forever. */
#include "execpath.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* glibc's execvp searches this when PATH is unset. */
#define DEFAULT_PATH "/bin:/usr/bin"

int self_dir(char *out, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", out, size);
	if (n <= 0 || (size_t)n >= size)
		return -1;
	out[n] = '\0';
	char *slash = strrchr(out, '/');
	if (!slash)
		return -1;
	if (slash == out)
		slash[1] = '\0';
	else
		*slash = '\0';
	return 0;
}

int sibling(const char *dir, const char *name, char *out, size_t size)
{
	int n = snprintf(out, size, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
	return n < 0 || (size_t)n >= size ? -1 : 0;
}

static bool executable(const char *path, struct stat *st)
{
	return stat(path, st) == 0 && S_ISREG(st->st_mode) && (st->st_mode & 0111) &&
	       access(path, X_OK) == 0;
}

static bool same_file(const struct stat *a, const char *path)
{
	struct stat b;
	return stat(path, &b) == 0 && a->st_dev == b.st_dev && a->st_ino == b.st_ino;
}

int resolve_runtime(const char *name, const char *selfdir, char *out, size_t size)
{
	struct stat st;
	bool found = false;

	if (name[0] == '\0')
		return -1;
	if (strchr(name, '/')) {
		if (strlen(name) >= size || !executable(name, &st))
			return -1;
		strcpy(out, name);
		found = true;
	} else {
		const char *path = getenv("PATH");
		if (!path)
			path = DEFAULT_PATH;
		for (const char *p = path;; p++) {
			const char *end = strchrnul(p, ':');
			size_t dlen = (size_t)(end - p);
			int n = snprintf(out, size, "%.*s/%s", (int)dlen, dlen ? p : ".", name);
			if (n > 0 && (size_t)n < size && executable(out, &st)) {
				/* Like Go's exec.LookPath: a runtime found relative
				 * to the working directory is refused, not run. */
				if (out[0] != '/')
					return -1;
				found = true;
				break;
			}
			if (*end == '\0')
				break;
			p = end;
		}
	}
	if (!found)
		return -1;
	if (same_file(&st, "/proc/self/exe"))
		return -1;
	if (selfdir) {
		char wrapper[strlen(selfdir) + sizeof WRAPPER_NAME + 1];
		if (sibling(selfdir, WRAPPER_NAME, wrapper, sizeof wrapper) == 0 && same_file(&st, wrapper))
			return -1;
	}
	return 0;
}
