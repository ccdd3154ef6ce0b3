/* execpath.h: where muxflow-runtime's neighbours are and what the policy's
 * runtime name resolves to. */
#ifndef MUXFLOW_EXECPATH_H
#define MUXFLOW_EXECPATH_H

#include <stddef.h>

#define WRAPPER_NAME "muxflow-wrapper"
#define HOOK_NAME "muxflow-hook"

/* self_dir writes the directory of this process's executable. 0 or -1. */
int self_dir(char *out, size_t size);

/* sibling writes dir/name; 0, or -1 when it does not fit. */
int sibling(const char *dir, const char *name, char *out, size_t size);

/* resolve_runtime finds name as execvp would (a name with a '/' is used
 * as it is, else PATH is searched) and writes the executable's path.
 * -1 when there is none, when it is found through a relative PATH entry,
 * or when it is this program or the wrapper in selfdir (a loop). */
int resolve_runtime(const char *name, const char *selfdir, char *out, size_t size);

#endif
