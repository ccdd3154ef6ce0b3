/* probe.h — what the fake driver's C probes (apiprobe.c, greenprobe.c) share: a check
 * per call or condition, printed "ok NAME" or "FAIL NAME: ...", and the failures counted
 * for the summary line the Go tests read. */
#ifndef GPUSIM_TESTS_PROBE_H
#define GPUSIM_TESTS_PROBE_H

#include <stdio.h>

#include <cuda.h>

static int fails;

#define CHECK(name, expr, want)                                                                    \
	do {                                                                                       \
		CUresult r_ = (expr);                                                              \
		if (r_ != (want)) {                                                                \
			const char *s_ = "?";                                                      \
			cuGetErrorName(r_, &s_);                                                   \
			printf("FAIL %s: got %s (%d), want %d\n", name, s_, (int)r_, (int)(want)); \
			fails++;                                                                   \
		} else {                                                                           \
			printf("ok %s\n", name);                                                   \
		}                                                                                  \
	} while (0)

#define TRUE(name, cond)                                   \
	do {                                               \
		if (!(cond)) {                             \
			printf("FAIL %s: %s\n", name, #cond); \
			fails++;                           \
		} else {                                   \
			printf("ok %s\n", name);           \
		}                                          \
	} while (0)

#endif
