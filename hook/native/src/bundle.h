/* bundle.h: reading and replacing a bundle's config.json. */
#ifndef MUXFLOW_BUNDLE_H
#define MUXFLOW_BUNDLE_H

#include <stddef.h>

#define CONFIG_NAME "config.json"
#define CONFIG_MAX_SIZE (16 << 20)

struct config_file {
	int dirfd;  /* the bundle directory, open (close-on-exec) */
	char *data; /* config.json's bytes (NUL-terminated), in static storage
		     * that the next config_open reuses */
	size_t len;
};

/* config_open reads <bundle>/config.json: it must be a regular file in the
 * bundle itself (a symlink is not followed) of at most 16 MiB. 0, or -1
 * with nothing held. */
int config_open(const char *bundle, struct config_file *cf);

/* config_replace rewrites config.json with data, in place (same inode,
 * mode and owner); a symlink in its place is not written through. 0, or
 * -1 with a sentence in err and config.json as config_open read it. */
int config_replace(const struct config_file *cf, const char *data, size_t len,
		   char *err, size_t errlen);

void config_close(struct config_file *cf);

#endif
