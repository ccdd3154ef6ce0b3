/* xcblock — create, change and show a libxcuda control block from the
 * shell, straight from xcuda_ctl.h (for the benchmarks and the real-GPU
 * check, where Go may not be installed). muxd uses the Go package
 * libxcuda/ctlblock instead.
 *   xcblock create DIR [key=value...]
 *   xcblock set DIR key=value...
 *   xcblock show DIR
 *   xcblock signal FILE [slotN=value... followersN=count...]
 *                                          create the GPU signal page (if
 *                                          missing) and store slot values and
 *                                          follower counts
 * keys: share (basis points), paused (0/1), mem0..mem15 (bytes),
 *       inflight, burst_ns, mps_pct, pinned0..pinned15 (bytes), policy (0/1),
 *       role (0 none, 1 publish, 2 follow), mask (signal slots), hold_window_ns,
 *       hold_period_ns, hold_max_bp, confine_pct */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xcuda_ctl.h"

static int write_file(const char *dir, const char *name, const void *data, size_t n, mode_t mode)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || write(fd, data, n) != (ssize_t)n || fchmod(fd, mode) != 0 || close(fd) != 0) {
        fprintf(stderr, "xcblock: write %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "xcblock: install %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void *map(const char *dir, const char *name, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR);
    if (fd < 0) {
        fprintf(stderr, "xcblock: open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static int set(xcuda_limits *l, const char *kv)
{
    char key[32];
    const char *eq = strchr(kv, '=');
    if (eq == NULL || (size_t)(eq - kv) >= sizeof key)
        return -1;
    memcpy(key, kv, (size_t)(eq - kv));
    key[eq - kv] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(eq + 1, &end, 0);
    if (errno != 0 || *end != 0 || end == eq + 1)
        return -1;
    int dev;
    if (strcmp(key, "share") == 0 && v <= XCUDA_SHARE_FULL)
        __atomic_store_n(&l->share_bp, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "paused") == 0 && v <= 1)
        __atomic_store_n(&l->paused, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "inflight") == 0 && v <= XCUDA_MAX_INFLIGHT_CAP)
        __atomic_store_n(&l->max_inflight, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "burst_ns") == 0 && v <= 1000000000ull)
        __atomic_store_n(&l->burst_ns, (uint64_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "mps_pct") == 0 && v <= 100)
        __atomic_store_n(&l->mps_active_thread_pct, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "role") == 0 && v <= 2)
        __atomic_store_n(&l->signal_role, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "mask") == 0)
        __atomic_store_n(&l->signal_mask, (uint64_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "hold_window_ns") == 0)
        __atomic_store_n(&l->hold_window_ns, (uint64_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "hold_period_ns") == 0)
        __atomic_store_n(&l->hold_period_ns, (uint64_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "hold_max_bp") == 0 && v <= 0xffffffffull)
        __atomic_store_n(&l->hold_max_bp, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "confine_pct") == 0 && v <= 100)
        __atomic_store_n(&l->confine_pct, (uint32_t)v, __ATOMIC_RELAXED);
    else if (strcmp(key, "policy") == 0 && v <= 1)
        __atomic_store_n(&l->fail_policy, (uint32_t)v, __ATOMIC_RELAXED);
    else if (sscanf(key, "mem%d", &dev) == 1 && dev >= 0 && dev < XCUDA_MAX_DEVICES)
        __atomic_store_n(&l->mem_limit[dev], (uint64_t)v, __ATOMIC_RELAXED);
    else if (sscanf(key, "pinned%d", &dev) == 1 && dev >= 0 && dev < XCUDA_MAX_DEVICES)
        __atomic_store_n(&l->mps_pinned_limit[dev], (uint64_t)v, __ATOMIC_RELAXED);
    else
        return -1;
    return 0;
}

static int set_all(xcuda_limits *l, int n, char **kvs)
{
    __atomic_add_fetch(&l->generation, 1, __ATOMIC_ACQ_REL);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (set(l, kvs[i]) != 0) {
            fprintf(stderr, "xcblock: bad setting %s\n", kvs[i]);
            rc = 2;
        }
    }
    __atomic_add_fetch(&l->generation, 1, __ATOMIC_ACQ_REL);
    return rc;
}

static int signal_page(const char *path, int n, char **kvs)
{
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "xcblock: open %s: %s\n", path, strerror(errno));
        return 1;
    }
    if ((size_t)st.st_size < sizeof(xcuda_signal) && ftruncate(fd, sizeof(xcuda_signal)) != 0) {
        fprintf(stderr, "xcblock: size %s: %s\n", path, strerror(errno));
        return 1;
    }
    xcuda_signal *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return 1;
    if (s->hdr.magic != XCUDA_SIGNAL_MAGIC)
        s->hdr = (xcuda_header){XCUDA_SIGNAL_MAGIC, XCUDA_CTL_VERSION, sizeof *s};
    for (int i = 0; i < n; i++) {
        int slot;
        unsigned long long v;
        if (sscanf(kvs[i], "slot%d=%llu", &slot, &v) == 2 && slot >= 0 &&
            slot < XCUDA_SIGNAL_SLOTS) {
            __atomic_store_n(&s->slot[slot].online_ns, (uint64_t)v, __ATOMIC_RELAXED);
        } else if (sscanf(kvs[i], "followers%d=%llu", &slot, &v) == 2 && slot >= 0 &&
                   slot < XCUDA_SIGNAL_SLOTS && v <= UINT32_MAX) {
            __atomic_store_n(&s->slot[slot].followers, (uint32_t)v, __ATOMIC_RELAXED);
        } else {
            fprintf(stderr, "xcblock: bad setting %s\n", kvs[i]);
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: xcblock create|set|show DIR [key=value...]\n");
        return 2;
    }
    const char *dir = argv[2];
    if (strcmp(argv[1], "signal") == 0)
        return signal_page(dir, argc - 3, argv + 3);
    if (strcmp(argv[1], "create") == 0) {
        xcuda_limits l;
        memset(&l, 0, sizeof l);
        l.hdr = (xcuda_header){XCUDA_LIMITS_MAGIC, XCUDA_CTL_VERSION, sizeof l};
        l.share_bp = XCUDA_SHARE_FULL;
        int rc = set_all(&l, argc - 3, argv + 3);
        l.generation = 0;
        static xcuda_usage u;
        u.hdr = (xcuda_header){XCUDA_USAGE_MAGIC, XCUDA_CTL_VERSION, sizeof u};
        if (rc != 0 || (mkdir(dir, 0755) != 0 && errno != EEXIST) ||
            write_file(dir, XCUDA_LIMITS_FILE, &l, sizeof l, 0644) != 0 ||
            write_file(dir, XCUDA_USAGE_FILE, &u, sizeof u, 0600) != 0)
            return rc ? rc : 1;
        return 0;
    }
    xcuda_limits *l = map(dir, XCUDA_LIMITS_FILE, sizeof *l);
    xcuda_usage *u = map(dir, XCUDA_USAGE_FILE, sizeof *u);
    if (l == NULL || u == NULL || l->hdr.magic != XCUDA_LIMITS_MAGIC ||
        u->hdr.magic != XCUDA_USAGE_MAGIC) {
        fprintf(stderr, "xcblock: %s is not a control block\n", dir);
        return 1;
    }
    if (strcmp(argv[1], "set") == 0)
        return set_all(l, argc - 3, argv + 3);
    if (strcmp(argv[1], "show") == 0) {
        printf("share_bp=%u paused=%u mem0=%llu reserved0=%llu peak0=%llu oom_denials=%u "
               "launches=%llu throttled_ns=%llu gpu_time_ns=%llu inflight=%u online_held_ns=%llu "
               "confine_pct=%u confine_state=%u confined_sms=%u\n",
               l->share_bp, l->paused, (unsigned long long)l->mem_limit[0],
               (unsigned long long)u->reserved_bytes[0], (unsigned long long)u->peak_bytes[0],
               u->oom_denials, (unsigned long long)u->launches,
               (unsigned long long)u->throttled_ns, (unsigned long long)u->gpu_time_ns,
               u->inflight, (unsigned long long)u->online_held_ns, l->confine_pct,
               u->confine_state, u->confined_sms);
        return 0;
    }
    fprintf(stderr, "xcblock: unknown command %s\n", argv[1]);
    return 2;
}
