/* runlog.h: lines in the runtime's --log file, in runc's (logrus's) two
 * formats, where containerd looks for why a runtime command failed. */
#ifndef MUXFLOW_RUNLOG_H
#define MUXFLOW_RUNLOG_H

#include <stddef.h>
#include <time.h>

/* json_escape writes s[0..n) as the inside of a JSON string the way Go's
 * encoding/json does (HTML-safe, invalid UTF-8 as \ufffd); out must hold
 * 6n+1 bytes. Returns the length written (NUL not counted). */
size_t json_escape(const char *s, size_t n, char *out);

/* text_quote writes s[0..n) as a double-quoted string like Go's %q;
 * out must hold 10n+3 bytes. Returns the length written. */
size_t text_quote(const char *s, size_t n, char *out);

/* rfc3339nano formats ts in UTC like Go's time.RFC3339Nano; out must hold
 * 40 bytes. */
size_t rfc3339nano(const struct timespec *ts, char *out);

/* runlog_line builds one log line (with '\n') into a malloc'd buffer;
 * id, when not NULL, is added as the field "container". */
char *runlog_line(const char *format, const char *level, const char *msg,
		  const char *id, const struct timespec *now, size_t *len);

/* runlog_append appends one line to path (created 0600); best effort. */
void runlog_append(const char *path, const char *format, const char *level,
		   const char *msg, const char *id);

#endif
