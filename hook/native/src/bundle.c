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

/* write_all writes data at offset 0 of fd. */
static int write_all(int fd, const char *data, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t w = pwrite(fd, data + done, len - done, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

/* Written in place: nothing reads config.json between containerd writing it
 * and the runtime this program execs, so a temporary file and a rename
 * (two directory changes, a fresh inode and its writeback) buy no
 * atomicity anyone observes. The inode, and so its mode and owner, stay. */
int config_replace(const struct config_file *cf, const char *data, size_t len,
		   char *err, size_t errlen)
{
	const char *step = "open";
	struct stat st;
	int fd, e;

	fd = openat(cf->dirfd, CONFIG_NAME, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	step = "check";
	if (fstat(fd, &st) != 0) {
		e = errno;
		goto failfd;
	}
	if (!S_ISREG(st.st_mode)) {
		e = EINVAL;
		goto failfd;
	}
	step = "write";
	if (write_all(fd, data, len) != 0 || ftruncate(fd, (off_t)len) != 0) {
		e = errno;
		/* Put back what was read, so that a failure leaves config.json
		 * as it was: its blocks are allocated already. */
		if (cf->data && write_all(fd, cf->data, cf->len) == 0 &&
		    ftruncate(fd, (off_t)cf->len) != 0) {
			/* Nothing more can be done; the error reported is the first. */
		}
		goto failfd;
	}
	step = "close";
	if (close(fd) != 0) {
		e = errno;
		goto fail;
	}
	return 0;
failfd:
	close(fd);
fail:
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
