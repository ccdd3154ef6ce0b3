/* check.h: the few helpers the C tests share: a failure counter that
 * keeps going after a failed check, so one run shows every failure. */
#ifndef MUXFLOW_CHECK_H
#define MUXFLOW_CHECK_H

#include <stdio.h>
#include <string.h>

extern int check_failures;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			check_failures++;                                       \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);    \
			fprintf(stderr, __VA_ARGS__);                           \
			fputc('\n', stderr);                                    \
		}                                                               \
	} while (0)

#define CHECK_STR(got, want)                                                     \
	do {                                                                     \
		const char *g_ = (got), *w_ = (want);                            \
		CHECK(g_ && strcmp(g_, w_) == 0, "%s = \"%s\", want \"%s\"", #got, \
		      g_ ? g_ : "(null)", w_);                                   \
	} while (0)

#endif
