/* pidreport.c: muxd needs a GPU container's host pid. An OCI createRuntime
 * hook would give it, but runc starting a hook costs a process start and a
 * few milliseconds on every container's start. muxflow-runtime names the pid
 * file in its create request, and muxd watches it itself when it can
 * (muxd/daemon/pidwatch.go, answer 201). Otherwise (answer 200: an older
 * muxd, or one that cannot see or watch the file), muxflow-runtime
 * forks a small reporter just before it execs the runtime: the reporter
 * waits, off the runtime's path and on another core, for the pid file the
 * runtime writes once the container's process exists (--pid-file, which
 * containerd always passes and which is added when missing), and sends the
 * pid to muxd the way muxflow-hook would. */
#include "pidreport.h"

#include "args.h"
#include "muxdcall.h"
#include "report.h"
#include "runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The largest pid Linux hands out (PID_MAX_LIMIT on 64-bit). */
#define PID_LIMIT 4194304

static int64_t mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

int pidreport_prepare(struct pidreport *pr, const char *pid_file, const char *bundle)
{
	char joined[2 * PATH_MAX + 2], dir[PATH_MAX];
	struct stat st;
	char *slash;

	pr->inotify_fd = pr->runtime_pidfd = -1;
	pr->child = 0;
	pr->added = pid_file[0] == '\0';
	if (pr->added) {
		if ((size_t)snprintf(joined, sizeof joined, "%s/%s", bundle, PIDREPORT_FILE) >= sizeof joined)
			return -1;
	} else if (pid_file[0] == '/') {
		if (strlen(pid_file) >= sizeof joined)
			return -1;
		strcpy(joined, pid_file);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof cwd) ||
		    (size_t)snprintf(joined, sizeof joined, "%s/%s", cwd, pid_file) >= sizeof joined)
			return -1;
	}
	if (strlen(joined) >= PATH_MAX)
		return -1;
	path_clean(joined, pr->path);
	slash = strrchr(pr->path, '/');
	if (!slash || slash[1] == '\0')
		return -1;
	pr->name = slash + 1;
	if (slash == pr->path) {
		strcpy(dir, "/");
	} else {
		memcpy(dir, pr->path, (size_t)(slash - pr->path));
		dir[slash - pr->path] = '\0';
	}
	if (pr->added)
		unlink(pr->path); /* a stale one in the bundle is ours to remove */
	pr->existed = lstat(pr->path, &st) == 0;
	if (pr->existed) {
		pr->dev = st.st_dev;
		pr->ino = st.st_ino;
		pr->mtime_ns = mtime_ns(&st);
	}
	pr->inotify_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (pr->inotify_fd < 0)
		goto fail;
	/* runc writes a temporary file and renames it; crun may write in place. */
	if (inotify_add_watch(pr->inotify_fd, dir, IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR) < 0)
		goto fail;
	pr->runtime_pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0); /* close-on-exec */
	if (pr->runtime_pidfd < 0)
		goto fail;
	return 0;
fail:
	if (pr->inotify_fd >= 0)
		close(pr->inotify_fd);
	pr->inotify_fd = -1;
	return -1;
}

/* read_pid reads a pid file as runc and crun write it. */
static int read_pid(const char *path, pid_t *pid)
{
	char buf[32];
	ssize_t n;
	long v = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	if (n == 0 || n > 7)
		return -1;
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -1;
		v = v * 10 + (buf[i] - '0');
	}
	if (v <= 0 || v > PID_LIMIT)
		return -1;
	*pid = (pid_t)v;
	return 0;
}

/* fresh reads the pid file when the runtime has written it since prepare. */
static int fresh(const struct pidreport *pr, pid_t *pid)
{
	struct stat st;

	if (lstat(pr->path, &st) != 0 || !S_ISREG(st.st_mode))
		return -1;
	if (pr->existed && st.st_dev == pr->dev && st.st_ino == pr->ino && mtime_ns(&st) == pr->mtime_ns)
		return -1;
	return read_pid(pr->path, pid);
}

static void warn(const struct pidreport_target *t, const char *msg)
{
	if (t->log[0])
		runlog_append(t->log, t->log_format, "error", msg, t->id);
	else
		say(msg);
}

/* report sends the pid to muxd; on failure msg says why. */
static int report(const struct pidreport_target *t, pid_t pid, char *msg, size_t msglen)
{
	size_t n = strlen(t->id);
	char *body = malloc(6 * n + 64), err[512];
	struct muxd_reply reply;
	size_t w;
	int rc = -1;

	if (!body) {
		snprintf(msg, msglen, "muxflow-runtime: cannot report container %s (pid %d) to muxd: out of memory",
			 t->id, (int)pid);
		return -1;
	}
	w = (size_t)sprintf(body, "{\"id\":\"");
	w += json_escape(t->id, n, body + w);
	sprintf(body + w, "\",\"pid\":%d}", (int)pid);
	struct muxd_request req = {.socket = t->socket, .timeout_ns = t->timeout_ns, .method = "POST",
				   .target = MUXD_PATH_HOOKS "create-runtime", .body = body,
				   .body_len = strlen(body)};
	enum muxd_outcome o = muxd_call(&req, &reply, err, sizeof err);
	if (o != MUXD_ANSWERED) {
		snprintf(msg, msglen, "muxflow-runtime: cannot report container %s (pid %d) to muxd at %s: %s",
			 t->id, (int)pid, t->socket, err[0] ? err : "no answer");
	} else if (reply.resp.status != 204) {
		char *s = sentence(reply.resp.body, reply.resp.body_len);
		snprintf(msg, msglen, "muxflow-runtime: muxd did not record container %s (pid %d): %s",
			 t->id, (int)pid, s ? s : "no reason given");
		free(s);
	} else {
		rc = 0;
	}
	muxd_reply_free(&reply);
	free(body);
	return rc;
}

/* forget has muxd drop a container whose runtime failed before its process
 * existed: nothing else would tell muxd. */
static void forget(const struct pidreport_target *t)
{
	muxd_unregister(t->socket, t->timeout_ns, t->id);
}

/* settle reports the container's pid, or, when its process has already
 * exited (a short container run by `runc run`, which writes the pid file
 * only once the process has started), has muxd forget the container. */
static void settle(const struct pidreport_target *t, pid_t pid)
{
	char msg[1024];
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd < 0) {
		forget(t);
		return;
	}
	if (report(t, pid, msg, sizeof msg) != 0) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1)
			forget(t); /* it exited meanwhile: nothing to report */
		else
			warn(t, msg);
	}
	close(fd);
}

static _Noreturn void reporter(struct pidreport *pr, const struct pidreport_target *t)
{
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	pid_t pid;

	/* The runtime's stdio may be the container's (containerd passes it to
	 * runc create), or pipes whose reader waits for every writer to close:
	 * the reporter must not hold them. A failure is said in the runtime's log,
	 * or on a terminal when there is no log. */
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		if (t->log[0] || !isatty(STDERR_FILENO))
			dup2(null, STDERR_FILENO);
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = pr->inotify_fd, .events = POLLIN},
				      {.fd = pr->runtime_pidfd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (p[0].revents) {
			char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
			ssize_t n;
			bool ours = false;
			while ((n = read(pr->inotify_fd, ev, sizeof ev)) > 0) {
				for (char *e = ev; e < ev + n;) {
					struct inotify_event *ie = (struct inotify_event *)e;
					if (ie->len && strcmp(ie->name, pr->name) == 0)
						ours = true;
					e += sizeof *ie + ie->len;
				}
			}
			if (ours && fresh(pr, &pid) == 0) {
				settle(t, pid);
				_exit(0);
			}
		}
		if (p[1].revents) {
			/* The runtime exited: it wrote the pid file by now or never will. */
			if (fresh(pr, &pid) == 0)
				settle(t, pid);
			else
				forget(t);
			_exit(0);
		}
	}
}

int pidreport_spawn(struct pidreport *pr, const struct pidreport_target *t)
{
	pid_t child;

	child = fork();
	if (child < 0)
		return -1;
	if (child == 0)
		reporter(pr, t);
	pr->child = child;
	close(pr->inotify_fd);
	close(pr->runtime_pidfd);
	pr->inotify_fd = pr->runtime_pidfd = -1;
	return 0;
}

void pidreport_release(struct pidreport *pr)
{
	if (pr->inotify_fd >= 0)
		close(pr->inotify_fd);
	if (pr->runtime_pidfd >= 0)
		close(pr->runtime_pidfd);
	pr->inotify_fd = pr->runtime_pidfd = -1;
}

void pidreport_cancel(struct pidreport *pr)
{
	if (pr->child > 0) {
		kill(pr->child, SIGKILL);
		waitpid(pr->child, NULL, 0);
		pr->child = 0;
	}
}
