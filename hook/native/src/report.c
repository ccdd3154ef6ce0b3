/* report.c: how both programs tell a person what went wrong. containerd
 * quotes a failed runtime's stderr, and runc hooks' stderr ends up in the
 * runtime's error, so a sentence goes out in a single write, whole. */
#include "report.h"

#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

void say(const char *msg)
{
	struct iovec iov[2] = {{(void *)msg, strlen(msg)}, {(void *)"\n", 1}};
	ssize_t r = writev(STDERR_FILENO, iov, 2);
	(void)r;
}

char *sentence(const char *body, size_t len)
{
	char *s;
	/* A NUL would cut the sentence short anyway; stop there. */
	const char *nul = memchr(body, '\0', len);
	if (nul)
		len = (size_t)(nul - body);
	while (len > 0 && strchr(" \t\r\n", body[len - 1]))
		len--;
	if (len == 0 || !(s = malloc(len + 1)))
		return NULL;
	memcpy(s, body, len);
	s[len] = '\0';
	return s;
}
