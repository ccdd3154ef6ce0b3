/* bundle.c: config.json of an OCI bundle, read and written only through
 * the bundle's own directory descriptor, so a config.json that is a
 * symlink out of the bundle is neither read nor written through. */
#include "bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Untouched pages of static storage cost nothing; the allocator's
 * start-up and first pages would cost the fast path more than the read. */
static char config_buf[CONFIG_MAX_SIZE + 2];

int config_open(const char *bundle, struct config_file *cf)
{
	struct stat st;
	size_t got = 0, cap;
	int fd;

	cf->data = NULL;
	cf->len = 0;
	cf->dirfd = open(bundle, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cf->dirfd < 0)
		return -1;
	/* O_NONBLOCK so that a FIFO in config.json's place cannot hang the
	 * open; it changes nothing for the regular file required below. */
	fd = openat(cf->dirfd, CONFIG_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_MAX_SIZE)
		goto fail;
	cf->mode = st.st_mode & 07777;
	/* One byte more than fstat promised: reading it means the file grew
	 * while being read, and the bytes cannot be trusted to be one spec. */
	cap = (size_t)st.st_size + 1;
	cf->data = config_buf;
	for (;;) {
		ssize_t r = read(fd, cf->data + got, cap - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		got += (size_t)r;
		if (got == cap)
			goto fail;
	}
	close(fd);
	cf->data[got] = '\0';
	cf->len = got;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	config_close(cf);
	return -1;
}

int config_replace(const struct config_file *cf, const char *data, size_t len,
		   char *err, size_t errlen)
{
	const char *step = "create " CONFIG_TMP_NAME;
	size_t done = 0;
	int fd, e;

	/* A temporary file left by a crash would make O_EXCL fail forever. */
	unlinkat(cf->dirfd, CONFIG_TMP_NAME, 0);
	fd = openat(cf->dirfd, CONFIG_TMP_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    cf->mode);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	/* openat's mode went through the umask; the runtime must see the
	 * same permissions as before. */
	step = "set the mode of " CONFIG_TMP_NAME;
	if (fchmod(fd, cf->mode) != 0)
		goto failfd;
	step = "write " CONFIG_TMP_NAME;
	while (done < len) {
		ssize_t w = write(fd, data + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			goto failfd;
		done += (size_t)w;
	}
	step = "close " CONFIG_TMP_NAME;
	if (close(fd) != 0) {
		e = errno;
		fd = -1;
		goto fail;
	}
	fd = -1;
	step = "rename " CONFIG_TMP_NAME " to " CONFIG_NAME;
	if (renameat(cf->dirfd, CONFIG_TMP_NAME, cf->dirfd, CONFIG_NAME) != 0) {
		e = errno;
		goto fail;
	}
	return 0;
failfd:
	e = errno;
	close(fd);
fail:
	unlinkat(cf->dirfd, CONFIG_TMP_NAME, 0);
	snprintf(err, errlen, "cannot replace the bundle's config.json: %s: %s", step, strerror(e));
	return -1;
}

void config_close(struct config_file *cf)
{
	if (cf->dirfd >= 0)
		close(cf->dirfd);
	cf->dirfd = -1;
	cf->data = NULL;
}
