/* specscan.h: the cheap test that clears most containers of being GPU
 * containers without decoding their spec. */
#ifndef MUXFLOW_SPECSCAN_H
#define MUXFLOW_SPECSCAN_H

#include <stddef.h>

/* spec_maybe_gpu returns 0 when the config.json bytes certainly describe
 * no GPU container, 1 when they might. */
int spec_maybe_gpu(const char *buf, size_t len);

#endif
