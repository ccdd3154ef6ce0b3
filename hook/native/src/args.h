/* args.h: the runc/crun command line as muxflow-runtime needs to see it. */
#ifndef MUXFLOW_ARGS_H
#define MUXFLOW_ARGS_H

#include <limits.h>
#include <stddef.h>

struct invocation {
	/* Every string is "" when absent; all but bundle point into argv. */
	const char *command;    /* create, run, delete...; "" for global-only lines */
	const char *log;        /* --log: where containerd reads the runtime's log */
	const char *log_format; /* --log-format: text (default) or json */
	const char *config;     /* crun's --config/-f */
	const char *pid_file;   /* --pid-file of create and run */
	const char *id;         /* container id of create and run */
	int command_at;         /* index of the command in args; -1 when there is none */
	char bundle[PATH_MAX];  /* absolute, clean bundle of create and run */
};

/* parse_args reads args (without argv[0]). cwd resolves a relative bundle;
 * NULL means the process's own working directory. Returns 0, or -1 with a
 * sentence in err; inv holds what was read up to the error either way. */
int parse_args(int argc, char *const *args, const char *cwd,
	       struct invocation *inv, char *err, size_t errlen);

/* path_clean is Go's path.Clean: out must hold strlen(in)+2 bytes. */
void path_clean(const char *in, char *out);

#endif
