/* httpresp.h: parsing muxd's HTTP/1.1 responses. */
#ifndef MUXFLOW_HTTPRESP_H
#define MUXFLOW_HTTPRESP_H

#include <stddef.h>

struct http_response {
	int status;
	const char *body; /* inside the parsed buffer */
	size_t body_len;
};

/* http_parse_response parses one complete response buf[0..len) (read to
 * the end of the connection). 0, or -1 with what is wrong in err. */
int http_parse_response(const char *buf, size_t len, struct http_response *r,
			char *err, size_t errlen);

#endif
