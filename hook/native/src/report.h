/* report.h: error sentences on stderr and sentences from muxd. */
#ifndef MUXFLOW_REPORT_H
#define MUXFLOW_REPORT_H

#include <stddef.h>

/* say writes msg and a newline to stderr in one write. */
void say(const char *msg);

/* sentence copies muxd's text/plain answer into a malloc'd string without
 * trailing whitespace; NULL when it is empty (or out of memory). */
char *sentence(const char *body, size_t len);

#endif
