/* pidreport.h: how muxflow-runtime tells muxd a GPU container's host pid
 * without an OCI hook on the container's start. */
#ifndef MUXFLOW_PIDREPORT_H
#define MUXFLOW_PIDREPORT_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* PIDREPORT_FILE is the pid file added to a runtime command line that has
 * none, inside the container's bundle. */
#define PIDREPORT_FILE "muxflow-init.pid"

struct pidreport {
	int inotify_fd;    /* watches the pid file's directory */
	int runtime_pidfd; /* this process, which is about to become the runtime */
	bool added;        /* the command line had no --pid-file: add path */
	pid_t child;       /* the reporter, once spawned */
	char path[PATH_MAX];
	const char *name; /* the last element of path */
	/* The pid file as it was before the runtime ran: a stale one must not be
	 * taken for the runtime's answer. */
	bool existed;
	dev_t dev;
	ino_t ino;
	int64_t mtime_ns;
};

/* The call the reporter makes, and where it says what went wrong. */
struct pidreport_target {
	const char *socket;
	int64_t timeout_ns;
	const char *id;
	const char *log, *log_format; /* the runtime's --log, "" for none */
};

/* pidreport_prepare sets up the watch before the runtime starts, so the pid
 * file cannot appear unseen. pid_file is the command line's --pid-file ("" for
 * none), resolved against the working directory as the runtime does. Returns
 * 0, or -1 when the pid cannot be watched (the caller then has muxd add the
 * createRuntime hook instead). */
int pidreport_prepare(struct pidreport *pr, const char *pid_file, const char *bundle);

/* pidreport_spawn forks the reporter, which waits for the runtime to write
 * the pid file, reports the pid to muxd and exits; if the runtime exits
 * without writing it, the reporter has muxd forget the container. The caller
 * execs the runtime next (with "--pid-file path" added when pr->added).
 * Returns 0, or -1 when the fork failed. */
int pidreport_spawn(struct pidreport *pr, const struct pidreport_target *t);

/* pidreport_release closes what pidreport_prepare opened, when muxd watches
 * the pid file itself (it answered the create request with 201) and no
 * reporter is spawned. */
void pidreport_release(struct pidreport *pr);

/* pidreport_cancel stops the reporter when the runtime could not be
 * exec'd: the caller unregisters the container itself. */
void pidreport_cancel(struct pidreport *pr);

#endif
