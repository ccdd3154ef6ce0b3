/* muxdcall.c: the small HTTP/1.1 client muxflow-runtime and muxflow-hook
 * use to talk to muxd (Go net/http) over its unix socket: one request per
 * connection, the answer read to the end of the connection, one deadline
 * over the whole exchange so that a slow muxd cannot hold a container
 * creation longer than hook.timeout. */
#include "muxdcall.h"

#include "pctenc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* set_timeout arms opt (SO_SNDTIMEO or SO_RCVTIMEO) with what is left
 * before deadline; 0, or -1 when the deadline has passed. */
static int set_timeout(int fd, int opt, int64_t deadline)
{
	int64_t left = deadline - now_ns();
	struct timeval tv;
	if (left <= 0)
		return -1;
	tv.tv_sec = (time_t)(left / 1000000000LL);
	tv.tv_usec = (suseconds_t)((left % 1000000000LL) / 1000);
	if (tv.tv_sec == 0 && tv.tv_usec == 0)
		tv.tv_usec = 1; /* zero would mean no timeout at all */
	return setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

char *muxd_build_request(const struct muxd_request *req, size_t *len)
{
	size_t cap = strlen(req->method) + strlen(req->target) + 160;
	char *head = malloc(cap);
	int n;
	if (!head)
		return NULL;
	if (req->body)
		n = snprintf(head, cap,
			     "%s %s HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n"
			     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			     req->method, req->target, req->body_len);
	else
		n = snprintf(head, cap, "%s %s HTTP/1.1\r\nHost: muxd\r\nConnection: close\r\n\r\n",
			     req->method, req->target);
	*len = (size_t)n;
	return head;
}

static enum muxd_outcome sys_fail(const char *what, int e, char *err, size_t errlen)
{
	if (e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT)
		return MUXD_TIMEOUT;
	snprintf(err, errlen, "%s: %s", what, strerror(e));
	return MUXD_IOERR;
}

/* send_all writes the head and the body; a peer that closes early (it
 * refused the request before reading it all) is not an error here, since
 * its answer says why. */
static enum muxd_outcome send_all(int fd, const char *head, size_t hlen, const struct muxd_request *req,
				  int64_t deadline, char *err, size_t errlen)
{
	struct iovec iov[2] = {
		{(void *)head, hlen},
		{(void *)req->body, req->body ? req->body_len : 0},
	};
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};

	while (iov[0].iov_len + iov[1].iov_len > 0) {
		if (set_timeout(fd, SO_SNDTIMEO, deadline) != 0)
			return MUXD_TIMEOUT;
		ssize_t w = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
			return MUXD_ANSWERED;
		if (w < 0)
			return sys_fail("send the request", errno, err, errlen);
		size_t done = (size_t)w;
		for (int i = 0; i < 2; i++) {
			size_t k = done < iov[i].iov_len ? done : iov[i].iov_len;
			iov[i].iov_base = (char *)iov[i].iov_base + k;
			iov[i].iov_len -= k;
			done -= k;
		}
		msg.msg_iov = iov[0].iov_len ? iov : iov + 1;
		msg.msg_iovlen = iov[0].iov_len ? 2 : 1;
	}
	return MUXD_ANSWERED;
}

static enum muxd_outcome recv_all(int fd, struct muxd_reply *reply, size_t *len, int64_t deadline,
				  char *err, size_t errlen)
{
	size_t cap = 16384, got = 0;
	char *buf = malloc(cap);

	if (!buf)
		return sys_fail("read the answer", ENOMEM, err, errlen);
	reply->raw = buf;
	for (;;) {
		if (got == cap) {
			if (cap > MUXD_MAX_RESPONSE) {
				snprintf(err, errlen, "it was longer than %u bytes", MUXD_MAX_RESPONSE);
				return MUXD_MALFORMED;
			}
			size_t ncap = cap * 2 > MUXD_MAX_RESPONSE + 1 ? MUXD_MAX_RESPONSE + 1 : cap * 2;
			char *nbuf = realloc(buf, ncap);
			if (!nbuf)
				return sys_fail("read the answer", ENOMEM, err, errlen);
			reply->raw = buf = nbuf;
			cap = ncap;
		}
		if (set_timeout(fd, SO_RCVTIMEO, deadline) != 0)
			return MUXD_TIMEOUT;
		ssize_t r = recv(fd, buf + got, cap - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sys_fail("read the answer", errno, err, errlen);
		if (r == 0)
			break;
		got += (size_t)r;
	}
	*len = got;
	return MUXD_ANSWERED;
}

enum muxd_outcome muxd_call(const struct muxd_request *req, struct muxd_reply *reply,
			    char *err, size_t errlen)
{
	int64_t deadline = now_ns() + req->timeout_ns;
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	size_t slen = strlen(req->socket), hlen = 0, len = 0;
	enum muxd_outcome out;
	char *head = NULL;
	int fd;

	memset(reply, 0, sizeof *reply);
	if (errlen)
		err[0] = '\0';
	if (slen >= sizeof addr.sun_path)
		return MUXD_TOOLONG;
	memcpy(addr.sun_path, req->socket, slen + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sys_fail("socket", errno, err, errlen);
	/* A unix connect waits for room in muxd's backlog under SO_SNDTIMEO. */
	if (set_timeout(fd, SO_SNDTIMEO, deadline) != 0) {
		close(fd);
		return MUXD_TIMEOUT;
	}
	while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		int e = errno;
		if (e == EINTR)
			continue;
		close(fd);
		if (e == ENOENT || e == ECONNREFUSED)
			return MUXD_DOWN;
		return sys_fail("connect", e, err, errlen);
	}
	reply->connected = true;
	head = muxd_build_request(req, &hlen);
	if (!head) {
		out = sys_fail("build the request", ENOMEM, err, errlen);
		goto done;
	}
	/* No shutdown(SHUT_WR) after the request: Go's net/http server takes
	 * a half-closed connection for a client gone away and cancels the
	 * handler's context. Connection: close makes muxd end the stream. */
	out = send_all(fd, head, hlen, req, deadline, err, errlen);
	if (out != MUXD_ANSWERED)
		goto done;
	out = recv_all(fd, reply, &len, deadline, err, errlen);
	if (out != MUXD_ANSWERED)
		goto done;
	if (http_parse_response(reply->raw, len, &reply->resp, err, errlen) != 0)
		out = MUXD_MALFORMED;
done:
	free(head);
	close(fd);
	return out;
}

void muxd_reply_free(struct muxd_reply *reply)
{
	free(reply->raw);
	reply->raw = NULL;
}

void muxd_unregister(const char *socket, int64_t timeout_ns, const char *id)
{
	size_t n = strlen(id);
	char *target = malloc(3 * n + 32), err[256];
	struct muxd_reply reply;

	if (!target)
		return;
	strcpy(target, MUXD_PATH_CONTAINERS);
	pct_encode(id, n, target + strlen(target));
	struct muxd_request req = {.socket = socket, .timeout_ns = timeout_ns, .method = "DELETE",
				   .target = target};
	muxd_call(&req, &reply, err, sizeof err);
	muxd_reply_free(&reply);
	free(target);
}
