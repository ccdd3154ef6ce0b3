/* fakeruntime.c: stands in for runc (and, under another name, for
 * muxflow-wrapper) in the program tests. It records what it was given in
 * $FAKE_OUT/<name>.argv (the arguments, NUL-terminated, argv[0] first),
 * <name>.config (the bundle's config.json as it saw it) and <name>.env
 * (the value of MUXFLOW_TEST_ENV); given --pid-file, it writes $FAKE_PID
 * there as runc does (a temporary file, then a rename), unless $FAKE_NOPID
 * is set; then it exits 0. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void save(const char *dir, const char *name, const char *ext, const char *data, size_t len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		exit(3);
	close(fd);
}

int main(int argc, char **argv)
{
	const char *out = getenv("FAKE_OUT"), *bundle = ".", *pidfile = NULL;
	const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	static char buf[32 << 20];
	size_t n = 0;

	if (!out)
		return 2;
	for (int i = 0; i < argc; i++) {
		size_t l = strlen(argv[i]) + 1;
		memcpy(buf + n, argv[i], l);
		n += l;
		if ((strcmp(argv[i], "--bundle") == 0 || strcmp(argv[i], "-b") == 0) && i + 1 < argc)
			bundle = argv[i + 1];
		else if (strncmp(argv[i], "--bundle=", 9) == 0)
			bundle = argv[i] + 9;
		else if (strcmp(argv[i], "--pid-file") == 0 && i + 1 < argc)
			pidfile = argv[i + 1];
	}
	save(out, name, "argv", buf, n);
	const char *env = getenv("MUXFLOW_TEST_ENV");
	save(out, name, "env", env ? env : "", env ? strlen(env) : 0);
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", bundle);
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		ssize_t r;
		n = 0;
		while ((r = read(fd, buf + n, sizeof buf - n)) > 0)
			n += (size_t)r;
		close(fd);
		save(out, name, "config", buf, n);
	}
	if (pidfile && getenv("FAKE_PID") && !getenv("FAKE_NOPID")) {
		char tmp[4096];
		snprintf(tmp, sizeof tmp, "%s.tmp", pidfile);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		const char *pid = getenv("FAKE_PID");
		if (fd < 0 || write(fd, pid, strlen(pid)) != (ssize_t)strlen(pid) || close(fd) != 0 ||
		    rename(tmp, pidfile) != 0)
			return 4;
	}
	return 0;
}
