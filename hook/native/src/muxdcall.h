/* muxdcall.h: one HTTP/1.1 request to muxd over its unix socket. */
#ifndef MUXFLOW_MUXDCALL_H
#define MUXFLOW_MUXDCALL_H

#include "httpresp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What came of a call. */
enum muxd_outcome {
	MUXD_ANSWERED,  /* a well-formed response is in reply */
	MUXD_DOWN,      /* connect: ENOENT or ECONNREFUSED; nothing was sent */
	MUXD_TOOLONG,   /* the socket path does not fit sun_path */
	MUXD_TIMEOUT,   /* no complete answer within the timeout */
	MUXD_IOERR,     /* another system error; err says which */
	MUXD_MALFORMED, /* the answer was not a response muxd would send; err says why */
};

struct muxd_request {
	const char *socket;
	int64_t timeout_ns; /* bounds the whole call, connect to last byte */
	const char *method;
	const char *target; /* path and query, already encoded */
	const void *body;   /* with Content-Type: application/json; NULL: none */
	size_t body_len;
};

struct muxd_reply {
	struct http_response resp;
	char *raw;      /* malloc'd; resp points into it */
	bool connected; /* the request may have reached muxd */
};

/* muxd's endpoints that the C programs call; the Go side is muxd/api
 * (RuntimeCreatePath, RuntimeHooksPath, ContainersPath), and hook/wrapper's
 * TestNativeConstants compiles this header and compares. */
#define MUXD_PATH_CREATE "/v1/runtime/create"
#define MUXD_PATH_HOOKS "/v1/runtime/hooks/" /* + create-runtime or poststop */
#define MUXD_PATH_CONTAINERS "/v1/containers/" /* + the percent-encoded id */
/* The largest OCI state muxflow-hook forwards; muxd reads at most as much
 * (hookstate.MaxStateSize). */
#define MUXD_MAX_STATE (1 << 20)

/* MUXD_MAX_RESPONSE bounds what is read; muxd's largest answer is a
 * config.json (at most 16 MiB) with headers. */
#define MUXD_MAX_RESPONSE (32u << 20)

/* muxd_build_request returns the request head (up to and including the
 * blank line) in a malloc'd buffer; NULL when out of memory. */
char *muxd_build_request(const struct muxd_request *req, size_t *len);

enum muxd_outcome muxd_call(const struct muxd_request *req, struct muxd_reply *reply,
			    char *err, size_t errlen);

void muxd_reply_free(struct muxd_reply *reply);

/* muxd_unregister has muxd forget container id (DELETE /v1/containers/ID):
 * best effort, for a create that failed after muxd registered it. */
void muxd_unregister(const char *socket, int64_t timeout_ns, const char *id);

#endif
