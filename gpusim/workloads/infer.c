/* infer — an online inference service stand-in. Requests arrive open-loop
 * from a rate trace (constant, diurnal, bursty or a CSV); each request copies
 * its input in, runs a sequence of kernels, copies its output out, and is
 * done when its stream synchronises. One server, first come first served:
 * a request that arrives while another runs waits. Prints JSON with three
 * latencies per request:
 *   req_*  arrival to completion, queueing included, rebuilt from the
 *          scheduled arrivals and the GPU-side service times (free of this
 *          host's scheduling noise) — the figure a user of the service feels;
 *   gpu_*  GPU-side service time alone (events around the request);
 *   p*_ms  arrival to completion by the host's wall clock (queueing and host
 *          delays included). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

struct trace {
	int kind; /* 0 constant, 1 diurnal, 2 bursty, 3 csv */
	double a, b, c, d;
	double *ct, *cq;
	size_t cn;
};

static int load_csv(struct trace *t, const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "infer: cannot open rate CSV %s\n", path);
		return -1;
	}
	char line[256];
	size_t cap = 0;
	while (fgets(line, sizeof line, f) != NULL) {
		double ts, q;
		if (sscanf(line, "%lf,%lf", &ts, &q) != 2)
			continue; /* header or comment */
		if (ts < 0 || q < 0 || (t->cn > 0 && ts < t->ct[t->cn - 1])) {
			fprintf(stderr, "infer: rate CSV %s: times must rise and values be non-negative\n", path);
			fclose(f);
			return -1;
		}
		if (t->cn == cap) {
			cap = cap ? 2 * cap : 64;
			t->ct = realloc(t->ct, cap * sizeof *t->ct);
			t->cq = realloc(t->cq, cap * sizeof *t->cq);
			if (t->ct == NULL || t->cq == NULL) {
				fclose(f);
				return -1;
			}
		}
		t->ct[t->cn] = ts;
		t->cq[t->cn] = q;
		t->cn++;
	}
	fclose(f);
	if (t->cn == 0) {
		fprintf(stderr, "infer: rate CSV %s has no \"seconds,qps\" rows\n", path);
		return -1;
	}
	return 0;
}

static int parse_trace(struct trace *t, const char *s)
{
	memset(t, 0, sizeof *t);
	if (sscanf(s, "constant:%lf", &t->a) == 1 && t->a > 0) {
		t->kind = 0;
		return 0;
	}
	if (sscanf(s, "diurnal:%lf:%lf:%lf", &t->a, &t->b, &t->c) == 3 && t->a >= 0 && t->b >= t->a && t->c > 0) {
		t->kind = 1;
		return 0;
	}
	if (sscanf(s, "bursty:%lf:%lf:%lf:%lf", &t->a, &t->b, &t->c, &t->d) == 4 && t->a >= 0 && t->b >= 0 &&
	    t->c > 0 && t->d >= t->c) {
		t->kind = 2;
		return 0;
	}
	if (strncmp(s, "csv:", 4) == 0) {
		t->kind = 3;
		return load_csv(t, s + 4);
	}
	fprintf(stderr, "infer: bad --rate %s (want constant:QPS, diurnal:MIN:MAX:PERIOD_S, "
			"bursty:BASE:PEAK:ON_MS:PERIOD_MS or csv:FILE)\n", s);
	return -1;
}

static double rate_at(const struct trace *t, double x)
{
	switch (t->kind) {
	case 0: return t->a;
	case 1: return t->a + (t->b - t->a) * (1 - cos(2 * M_PI * x / t->c)) / 2;
	case 2: return fmod(x * 1000, t->d) < t->c ? t->b : t->a;
	default: {
		double q = t->cq[0];
		for (size_t i = 0; i < t->cn && t->ct[i] <= x; i++)
			q = t->cq[i];
		return q;
	}
	}
}

static double max_rate(const struct trace *t)
{
	switch (t->kind) {
	case 0: return t->a;
	case 1:
	case 2: return t->b > t->a ? t->b : t->a;
	default: {
		double m = 0;
		for (size_t i = 0; i < t->cn; i++)
			m = t->cq[i] > m ? t->cq[i] : m;
		return m;
	}
	}
}

/* xorshift: reproducible arrivals for a seed */
static uint64_t rng = 88172645463325252ull;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return ((double)(rng >> 11) + 0.5) / 9007199254740992.0;
}

/* next_arrival: inhomogeneous Poisson by thinning, or evenly spaced */
static double next_arrival(const struct trace *t, double x, int poisson)
{
	double m = max_rate(t);
	if (m <= 0)
		return INFINITY;
	if (!poisson) {
		for (int i = 0; i < 1000000; i++) {
			double r = rate_at(t, x);
			if (r > 0)
				return x + 1 / r;
			x += 0.001;
		}
		return INFINITY;
	}
	for (;;) {
		x += -log(urand()) / m;
		if (urand() * m <= rate_at(t, x))
			return x;
	}
}

static double lat_mean(const struct latencies *l)
{
	double s = 0;
	for (size_t i = 0; i < l->n; i++)
		s += l->v[i];
	return l->n ? s / (double)l->n : 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: infer [--rate constant:QPS|diurnal:MIN:MAX:PERIOD_S|bursty:BASE:PEAK:ON_MS:PERIOD_MS|csv:FILE]\n"
		"             [--duration S] [--kernels N] [--kernel-us U] [--grid BLOCKS] [--threads T] [--bw F]\n"
		"             [--io-bytes B] [--device D] [--uniform] [--seed N] [--dlsym] [--trace FILE]\n"
		"             [--warmup]\n"
		"Prints one JSON line. req_p50_ms..req_mean_ms: request latency from arrival to\n"
		"completion, queueing included, rebuilt as a FIFO single-server queue from each\n"
		"request's scheduled arrival a_i and GPU-side time g_i (events around it, waits for\n"
		"SMs or time slices included): f_i = max(a_i, f_{i-1}) + g_i, latency f_i - a_i.\n"
		"gpu_p50_ms..gpu_mean_ms: g_i alone. p50_ms..mean_ms: arrival to completion by the\n"
		"host clock (includes host scheduling delays). --trace FILE writes one line per\n"
		"completed request: start_s,latency_ms,gpu_ms,req_ms (scheduled arrival, host-clock\n"
		"latency, GPU-side time, request latency).\n"
		"--warmup: serve requests at the trace's starting rate, unmeasured, until SIGUSR1,\n"
		"then run the measured schedule (a service that was up before its neighbours came);\n"
		"the measured arrivals depend on --seed only, not on how long the warm-up ran.\n");
}

static volatile sig_atomic_t measure_now;

static void on_usr1(int sig)
{
	(void)sig;
	measure_now = 1;
}

/* One request: input copy, kernels, output copy, synchronisation; its GPU-side time in
 * *gms when it succeeded. */
static CUresult serve(struct drv *d, CUstream st, CUfunction fn, CUevent ev0, CUevent ev1,
		      CUdeviceptr buf, char *host, uint64_t io, int kernels, unsigned grid,
		      unsigned threads, float *gms)
{
	CUresult r = d->EventRecord(ev0, st);
	if (r == CUDA_SUCCESS && io > 0)
		r = d->MemcpyHtoDAsync(buf, host, io, st);
	for (int i = 0; i < kernels && r == CUDA_SUCCESS; i++)
		r = d->LaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, st, NULL, NULL);
	if (r == CUDA_SUCCESS && io > 0)
		r = d->MemcpyDtoHAsync(host, buf, io, st);
	if (r == CUDA_SUCCESS)
		r = d->EventRecord(ev1, st);
	if (r == CUDA_SUCCESS)
		r = d->StreamSynchronize(st);
	if (r == CUDA_SUCCESS)
		r = d->EventElapsedTime(gms, ev0, ev1);
	return r;
}

/* Serves the trace's starting rate (Poisson or evenly spaced) until SIGUSR1 (sleeping in short steps so that the
 * measured schedule starts within a few milliseconds of it). */
static CUresult warm_up(struct drv *d, struct trace *tr, int poisson, CUstream st, CUfunction fn,
			CUevent ev0, CUevent ev1, CUdeviceptr buf, char *host, uint64_t io, int kernels,
			unsigned grid, unsigned threads)
{
	double r0 = rate_at(tr, 0) > 0 ? rate_at(tr, 0) : 1;
	double t0 = now_s(), a = 0;
	while (!measure_now) {
		double t = now_s();
		if (t < t0 + a) {
			double step = t0 + a - t;
			sleep_until(t + (step < 0.005 ? step : 0.005));
			continue;
		}
		float gms;
		CUresult r = serve(d, st, fn, ev0, ev1, buf, host, io, kernels, grid, threads, &gms);
		if (r != CUDA_SUCCESS)
			return r;
		a += poisson ? -log(urand()) / r0 : 1 / r0;
	}
	return CUDA_SUCCESS;
}

int main(int argc, char **argv)
{
	const char *rate = "constant:100";
	double duration = 5, kernel_us = 250, bw = 0.3;
	int kernels = 4, device = 0, poisson = 1, use_dlsym = 0, warmup = 0;
	const char *trace_path = NULL;
	unsigned grid = 264, threads = 256;
	uint64_t io = 64 << 10;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int ok = 1;
		if (strcmp(a, "--dlsym") == 0) {
			use_dlsym = 1;
			continue;
		} else if (strcmp(a, "--uniform") == 0) {
			poisson = 0;
			continue;
		} else if (strcmp(a, "--warmup") == 0) {
			warmup = 1;
			continue;
		}
		if (v == NULL) {
			usage();
			return 2;
		}
		i++;
		if (strcmp(a, "--rate") == 0)
			rate = v;
		else if (strcmp(a, "--duration") == 0)
			ok = sscanf(v, "%lf", &duration) == 1 && duration > 0 && duration <= 86400;
		else if (strcmp(a, "--kernels") == 0)
			ok = sscanf(v, "%d", &kernels) == 1 && kernels >= 1 && kernels <= 10000;
		else if (strcmp(a, "--kernel-us") == 0)
			ok = sscanf(v, "%lf", &kernel_us) == 1 && kernel_us > 0 && kernel_us <= 1e7;
		else if (strcmp(a, "--grid") == 0)
			ok = sscanf(v, "%u", &grid) == 1 && grid >= 1;
		else if (strcmp(a, "--threads") == 0)
			ok = sscanf(v, "%u", &threads) == 1 && threads >= 1 && threads <= 1024;
		else if (strcmp(a, "--bw") == 0)
			ok = sscanf(v, "%lf", &bw) == 1 && bw >= 0 && bw <= 1;
		else if (strcmp(a, "--io-bytes") == 0)
			ok = parse_bytes(v, &io) == 0;
		else if (strcmp(a, "--device") == 0)
			ok = sscanf(v, "%d", &device) == 1 && device >= 0;
		else if (strcmp(a, "--trace") == 0)
			trace_path = v;
		else if (strcmp(a, "--seed") == 0)
			ok = sscanf(v, "%lu", &rng) == 1 && rng != 0;
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "infer: bad value for %s: %s\n", a, v);
			usage();
			return 2;
		}
	}
	struct trace tr;
	if (parse_trace(&tr, rate) != 0)
		return 2;
	FILE *tf = NULL;
	if (trace_path != NULL) {
		if ((tf = fopen(trace_path, "w")) == NULL) {
			fprintf(stderr, "infer: cannot create trace %s\n", trace_path);
			return 2;
		}
		fprintf(tf, "start_s,latency_ms,gpu_ms,req_ms\n");
	}

	struct drv d;
	if (drv_load(&d, use_dlsym) != 0)
		return 1;
	CUresult r;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CUmodule mod;
	CUfunction fn;
	CUdeviceptr buf = 0;
	const char *step;
	if ((r = drv_open(&d, device, &dev, &ctx, &st, &step)) != CUDA_SUCCESS) {
		printf("{\"error\":\"%s: %s\"}\n", step, drv_errname(&d, r));
		return 3;
	}
	char text[512];
	struct kdef k = {"infer_layer", kernel_us, bw};
	if ((r = d.ModuleLoadData(&mod, module_text(&k, 1, text, sizeof text))) != CUDA_SUCCESS ||
	    (r = d.ModuleGetFunction(&fn, mod, "infer_layer")) != CUDA_SUCCESS ||
	    (io > 0 && (r = d.MemAlloc(&buf, io)) != CUDA_SUCCESS)) {
		printf("{\"error\":\"setup: %s\"}\n", drv_errname(&d, r));
		return 3;
	}
	char *host = io > 0 ? calloc(1, io) : NULL;
	/* events around each request give its GPU-side time (no queueing, no
	 * host-side delays) */
	CUevent ev0, ev1;
	if ((r = d.EventCreate(&ev0, 0)) != CUDA_SUCCESS || (r = d.EventCreate(&ev1, 0)) != CUDA_SUCCESS) {
		printf("{\"error\":\"events: %s\"}\n", drv_errname(&d, r));
		return 3;
	}
	struct latencies gpu = {0};
	/* the queue rebuilt from scheduled arrivals and GPU-side service times:
	 * free of host noise, yet a backlog shows as waiting */
	struct latencies req = {0};
	double finish = 0; /* when the previous request finished (s since t0) */

	struct latencies lat = {0};
	long requests = 0, errors = 0;
	CUresult first = CUDA_SUCCESS;
	/* The measured schedule is the same for a seed however long the warm-up ran (it
	 * draws from the same generator): runs compared side by side see the same
	 * arrivals, so their tail latencies differ by what they share the GPU with, not
	 * by where a burst of arrivals happened to fall. */
	const uint64_t seed = rng;
	if (warmup) {
		struct sigaction sa = {.sa_handler = on_usr1};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, NULL);
		if ((r = warm_up(&d, &tr, poisson, st, fn, ev0, ev1, buf, host, io, kernels, grid, threads)) !=
		    CUDA_SUCCESS) {
			printf("{\"error\":\"warm-up: %s\"}\n", drv_errname(&d, r));
			return 3;
		}
	}
	rng = seed;
	double t0 = now_s();
	double arrival = next_arrival(&tr, 0, poisson);
	while (arrival < duration) {
		sleep_until(t0 + arrival);
		requests++;
		float gms = 0;
		r = serve(&d, st, fn, ev0, ev1, buf, host, io, kernels, grid, threads, &gms);
		double done = now_s() - t0;
		if (r != CUDA_SUCCESS) {
			errors++;
			if (first == CUDA_SUCCESS)
				first = r;
			if (is_sticky(r))
				break; /* a dead context serves nothing more */
		} else {
			/* A failed request is left out of the queue as well (its
			 * service time is unknown); the error is counted. */
			finish = (arrival > finish ? arrival : finish) + gms / 1000.0;
			lat_add(&lat, (done - arrival) * 1000);
			lat_add(&gpu, gms);
			lat_add(&req, (finish - arrival) * 1000);
			if (tf != NULL)
				fprintf(tf, "%.9f,%.3f,%.6f,%.6f\n", arrival, (done - arrival) * 1000, gms,
					(finish - arrival) * 1000);
		}
		arrival = next_arrival(&tr, arrival, poisson);
	}
	double elapsed = now_s() - t0;
	if (elapsed < duration && first == CUDA_SUCCESS)
		elapsed = duration;
	double p50 = lat_pct(&lat, 50), p95 = lat_pct(&lat, 95), p99 = lat_pct(&lat, 99);
	double mean = lat_mean(&lat), gmean = lat_mean(&gpu), rmean = lat_mean(&req);
	double gp50 = lat_pct(&gpu, 50), gp99 = lat_pct(&gpu, 99);
	double rp50 = lat_pct(&req, 50), rp95 = lat_pct(&req, 95), rp99 = lat_pct(&req, 99);
	printf("{\"requests\":%ld,\"completed\":%zu,\"errors\":%ld,\"first_error\":\"%s\",\"duration_s\":%.3f,"
	       "\"qps\":%.2f,\"req_p50_ms\":%.3f,\"req_p95_ms\":%.3f,\"req_p99_ms\":%.3f,\"req_mean_ms\":%.3f,"
	       "\"p50_ms\":%.3f,\"p95_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f,"
	       "\"gpu_p50_ms\":%.3f,\"gpu_p99_ms\":%.3f,\"gpu_mean_ms\":%.3f}\n",
	       requests, lat.n, errors, first == CUDA_SUCCESS ? "" : drv_errname(&d, first), elapsed,
	       (double)lat.n / elapsed, rp50, rp95, rp99, rmean, p50, p95, p99, mean, gp50, gp99, gmean);
	fflush(stdout);
	if (tf != NULL && fclose(tf) != 0) {
		fprintf(stderr, "infer: writing trace %s failed\n", trace_path);
		if (first == CUDA_SUCCESS)
			return 1;
	}
	if (first != CUDA_SUCCESS)
		return 3;
	d.StreamDestroy(st);
	if (buf)
		d.MemFree(buf);
	d.PrimaryCtxRelease(dev);
	free(host);
	return 0;
}
