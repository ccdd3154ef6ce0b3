/* conn.c — the connection to gpusimd: cuInit, pipelined sends, round trips,
 * and the asynchronous sticky-error notifications. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

int gs_ndev;
struct gs_device gs_devs[GS_MAX_DEVICES];
int gs_initialized;
int gs_mps_server_pid;
struct CUctx_st *_Atomic gs_ctx_by_id[GS_MAX_CTX];

static int gs_fd = -1;
static _Atomic int gs_dead;
static _Atomic uint32_t gs_id_counter = 16;
_Atomic uint64_t gs_syncs;
static _Atomic uint64_t gs_req_counter = 1;
static pthread_once_t gs_once = PTHREAD_ONCE_INIT;
static CUresult gs_init_result = CUDA_ERROR_NOT_INITIALIZED;
static pthread_mutex_t gs_send_mu = PTHREAD_MUTEX_INITIALIZER;

/* replies are matched to waiting threads; one thread at a time reads */
struct gs_waiter {
	uint64_t id;
	int done;
	void *buf;
	uint32_t cap;
	struct gs_waiter *next;
};
static pthread_mutex_t gs_rx_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gs_rx_cv = PTHREAD_COND_INITIALIZER;
static int gs_reader_busy;
static struct gs_waiter *gs_waiters;

uint32_t gs_next_id(void) { return atomic_fetch_add(&gs_id_counter, 1); }

void gs_hdr_fill(struct gs_hdr *h, uint16_t op, uint32_t len)
{
	h->len = len;
	h->op = op;
	h->flags = 0;
	h->id = 0;
}

CUresult gs_send_ids(uint16_t op, uint32_t a, uint32_t b)
{
	struct gs_u32x2 m = {.a = a, .b = b};
	gs_hdr_fill(&m.h, op, sizeof m);
	return gs_send(&m, sizeof m);
}

CUresult gs_call_ids(uint16_t op, uint32_t a, uint32_t b)
{
	struct gs_u32x2 m = {.a = a, .b = b};
	gs_hdr_fill(&m.h, op, sizeof m);
	struct gs_reply r;
	CUresult res = gs_call(&m, sizeof m, &r, sizeof r);
	if (op == GS_SYNC && a != GS_SYNC_EVENT && res == CUDA_SUCCESS)
		atomic_fetch_add(&gs_syncs, 1);
	return res;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* What the socket delivered and no message has taken yet. One recv brings in every
 * message waiting — event completions come one per record, and a real driver reads
 * them from host memory without a system call each — and the reader takes messages
 * from here. Only the connection's reader touches it: the thread in read_as_reader,
 * or a thread holding gs_rx_mu while nobody reads (gs_poll). */
static char rx_buf[64 * 1024];
static size_t rx_start, rx_end;

/* rx_fill reads what the socket has into the empty buffer: with MSG_DONTWAIT, 0 when
 * nothing is waiting; otherwise it waits for at least one byte. -1: closed or failed. */
static int rx_fill(int flags)
{
	rx_start = rx_end = 0;
	for (;;) {
		ssize_t r = recv(gs_fd, rx_buf, sizeof rx_buf, flags);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (flags & MSG_DONTWAIT) && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (r <= 0)
			return -1;
		rx_end = (size_t)r;
		return 1;
	}
}

/* rx_take copies the next n bytes of the stream to p, waiting for them as needed. */
static int rx_take(void *p, size_t n)
{
	char *c = p;
	while (n > 0) {
		if (rx_start == rx_end && rx_fill(0) <= 0)
			return -1;
		size_t k = rx_end - rx_start < n ? rx_end - rx_start : n;
		memcpy(c, rx_buf + rx_start, k);
		rx_start += k;
		c += k;
		n -= k;
	}
	return 0;
}

CUresult gs_send(void *msg, uint32_t len)
{
	if (atomic_load_explicit(&gs_dead, memory_order_relaxed))
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	pthread_mutex_lock(&gs_send_mu);
	int rc = write_all(gs_fd, msg, len);
	pthread_mutex_unlock(&gs_send_mu);
	if (rc != 0) {
		atomic_store(&gs_dead, 1);
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	return CUDA_SUCCESS;
}

/* read_one reads one message and hands it to its waiter; rx lock NOT held */
static int read_one(void)
{
	struct gs_hdr h;
	if (rx_take(&h, sizeof h) != 0 || h.len < sizeof h || h.len > GS_MAX_MSG)
		return -1;
	uint32_t rest = h.len - (uint32_t)sizeof h;
	char small[512];
	char *body = rest <= sizeof small ? small : malloc(rest);
	if (body == NULL || rx_take(body, rest) != 0) {
		if (body != small)
			free(body);
		return -1;
	}
	if (h.op == GS_NOTIFY && rest >= 8) {
		uint32_t ctx;
		int32_t code;
		memcpy(&ctx, body, 4);
		memcpy(&code, body + 4, 4);
		if (ctx < GS_MAX_CTX) {
			struct CUctx_st *c = atomic_load(&gs_ctx_by_id[ctx]);
			if (c != NULL)
				atomic_store(&c->err, code);
		}
	} else if (h.op == GS_EVENT_DONE && h.len == sizeof(struct gs_event_done)) {
		struct gs_event_done d;
		memcpy((char *)&d + sizeof h, body, sizeof d - sizeof h);
		gs_event_done(d.event, d.gen, d.at_ns);
	} else if (h.op == GS_REPLY) {
		pthread_mutex_lock(&gs_rx_mu);
		for (struct gs_waiter *w = gs_waiters; w != NULL; w = w->next) {
			if (w->id == h.id) {
				uint32_t n = h.len < w->cap ? h.len : w->cap;
				memcpy(w->buf, &h, sizeof h < n ? sizeof h : n);
				if (n > sizeof h)
					memcpy((char *)w->buf + sizeof h, body, n - sizeof h);
				w->done = 1;
				break;
			}
		}
		pthread_mutex_unlock(&gs_rx_mu);
	}
	if (body != small)
		free(body);
	return 0;
}

/* read_as_reader reads one message as the connection's only reader, with
 * gs_rx_mu released meanwhile; called and returns with gs_rx_mu held. A read
 * error marks the connection dead; waiters are woken either way. */
static void read_as_reader(void)
{
	gs_reader_busy = 1;
	pthread_mutex_unlock(&gs_rx_mu);
	int rc = read_one();
	pthread_mutex_lock(&gs_rx_mu);
	gs_reader_busy = 0;
	if (rc != 0)
		atomic_store(&gs_dead, 1);
	pthread_cond_broadcast(&gs_rx_cv);
}

CUresult gs_call(void *msg, uint32_t len, void *reply, uint32_t reply_cap)
{
	if (atomic_load(&gs_dead))
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	struct gs_hdr *h = msg;
	h->id = atomic_fetch_add(&gs_req_counter, 1);
	memset(reply, 0, reply_cap);
	struct gs_waiter w = {.id = h->id, .buf = reply, .cap = reply_cap};
	pthread_mutex_lock(&gs_rx_mu);
	w.next = gs_waiters;
	gs_waiters = &w;
	pthread_mutex_unlock(&gs_rx_mu);

	CUresult res = gs_send(msg, len);
	pthread_mutex_lock(&gs_rx_mu);
	while (res == CUDA_SUCCESS && !w.done) {
		if (atomic_load(&gs_dead)) {
			res = CUDA_ERROR_DEVICE_UNAVAILABLE;
			break;
		}
		if (gs_reader_busy) {
			pthread_cond_wait(&gs_rx_cv, &gs_rx_mu);
			continue;
		}
		read_as_reader();
	}
	for (struct gs_waiter **p = &gs_waiters; *p != NULL; p = &(*p)->next) {
		if (*p == &w) {
			*p = w.next;
			break;
		}
	}
	pthread_mutex_unlock(&gs_rx_mu);
	if (res != CUDA_SUCCESS)
		return res;
	return (CUresult)((struct gs_reply *)reply)->result;
}

/* gs_poll reads one pending message if one is waiting and nobody else is
 * reading, so that a launch-only loop still learns of a sticky error. */
int gs_poll(void)
{
	pthread_mutex_lock(&gs_rx_mu);
	if (gs_reader_busy || atomic_load(&gs_dead)) {
		pthread_mutex_unlock(&gs_rx_mu);
		return 0;
	}
	int n = rx_start < rx_end ? 1 : rx_fill(MSG_DONTWAIT);
	if (n <= 0) {
		if (n < 0)
			atomic_store(&gs_dead, 1);
		pthread_mutex_unlock(&gs_rx_mu);
		return 0;
	}
	read_as_reader();
	pthread_mutex_unlock(&gs_rx_mu);
	return 1;
}

void gs_drain(void)
{
	while (gs_poll()) {
	}
}

static void gs_atexit(void);

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* mps_join asks the MPS control daemon for a server, as the real driver does
 * at initialisation: no daemon means no MPS. */
static void mps_join(void)
{
	const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
	if (dir == NULL || *dir == '\0')
		dir = "/tmp/nvidia-mps";
	char path[200];
	if (snprintf(path, sizeof path, "%s/control", dir) >= (int)sizeof path)
		return;
	int fd = connect_unix(path);
	if (fd < 0)
		return;
	char line[128];
	int n = snprintf(line, sizeof line, "gpusim_client_connect %u %d\n", (unsigned)getuid(), (int)getpid());
	char buf[128] = {0};
	size_t got = 0;
	if (write_all(fd, line, (size_t)n) == 0) {
		while (got < sizeof buf - 1) {
			ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
			if (r <= 0)
				break;
			got += (size_t)r;
			if (memchr(buf, '\n', got) != NULL)
				break;
		}
	}
	close(fd);
	int pid = 0;
	if (sscanf(buf, "ok %d", &pid) == 1 && pid > 0)
		gs_mps_server_pid = pid;
	else
		gs_mps_server_pid = -1; /* a daemon that could not give a server */
}

static void gs_init_once(void)
{
	const char *path = getenv("GPUSIM_SOCKET");
	if (path == NULL || *path == '\0')
		path = GS_DEFAULT_SOCKET;
	gs_fd = connect_unix(path);
	if (gs_fd < 0) {
		gs_init_result = CUDA_ERROR_NO_DEVICE;
		return;
	}
	if (write_all(gs_fd, GS_MAGIC, 8) != 0) {
		gs_init_result = CUDA_ERROR_NO_DEVICE;
		return;
	}
	struct gs_hello m = {.pid = (uint32_t)getpid(), .uid = (uint32_t)getuid(), .version = GS_VERSION};
	gs_hdr_fill(&m.h, GS_HELLO, sizeof m);
	struct gs_hello_reply r;
	CUresult res = gs_call(&m, sizeof m, &r, sizeof r);
	if (res != CUDA_SUCCESS || r.ndev == 0 || r.ndev > GS_MAX_DEVICES) {
		gs_init_result = CUDA_ERROR_NO_DEVICE;
		return;
	}
	/* CUDA_VISIBLE_DEVICES is honoured as a list of indices */
	int map[GS_MAX_DEVICES], nmap = 0;
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	if (vis != NULL) {
		const char *p = vis;
		while (*p != '\0' && nmap < GS_MAX_DEVICES) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p || v < 0 || v >= (long)r.ndev)
				break; /* like CUDA: stop at the first invalid entry */
			map[nmap++] = (int)v;
			p = *end == ',' ? end + 1 : end;
			if (*end != ',')
				break;
		}
	} else {
		for (uint32_t i = 0; i < r.ndev; i++)
			map[nmap++] = (int)i;
	}
	for (int i = 0; i < nmap; i++) {
		struct gs_dev_info q = {.dev = (uint32_t)map[i]};
		gs_hdr_fill(&q.h, GS_DEV_INFO, sizeof q);
		if (gs_call(&q, sizeof q, &gs_devs[i].info, sizeof gs_devs[i].info) != CUDA_SUCCESS) {
			gs_init_result = CUDA_ERROR_NO_DEVICE;
			return;
		}
		gs_devs[i].sim_index = map[i];
	}
	gs_ndev = nmap;
	mps_join();
	atexit(gs_atexit);
	gs_initialized = 1;
	gs_init_result = nmap > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult gs_init(void)
{
	pthread_once(&gs_once, gs_init_once);
	return gs_init_result;
}

/* gs_atexit destroys live contexts, which waits for their work: a process
 * that returns from main exits cleanly, one killed by a signal does not. */
static void gs_atexit(void)
{
	for (int i = 0; i < GS_MAX_CTX; i++) {
		struct CUctx_st *c = atomic_load(&gs_ctx_by_id[i]);
		if (c == NULL || atomic_load(&c->err) != 0)
			continue;
		(void)gs_call_ids(GS_CTX_DESTROY, c->id, 0);
	}
}
