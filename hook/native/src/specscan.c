/* specscan.c: the GPU token scan of the runtime's fast path.
 *
 * gpucontainer.Detect (Go) finds GPUs only through NVIDIA_VISIBLE_DEVICES
 * in an env entry, a "cdi.k8s.io/" annotation key, a "/dev/nvidia"
 * device path or the "muxflow.io/gpu" annotation key (quoted: the key
 * itself, not muxflow.io/gpu-memory). JSON can spell a string differently
 * only with a backslash escape, so bytes with no backslash and none of
 * those four tokens cannot
 * describe a GPU container, whatever else they are. Anything else goes to
 * muxd, which decodes the spec. */
#include "specscan.h"

#include <string.h>

#define TOKEN(s) s, sizeof(s) - 1

int spec_maybe_gpu(const char *buf, size_t len)
{
	return memchr(buf, '\\', len) != NULL ||
	       memmem(buf, len, TOKEN("NVIDIA_VISIBLE_DEVICES")) != NULL ||
	       memmem(buf, len, TOKEN("cdi.k8s.io/")) != NULL ||
	       memmem(buf, len, TOKEN("/dev/nvidia")) != NULL ||
	       memmem(buf, len, TOKEN("\"muxflow.io/gpu\"")) != NULL;
}
