/* event.c — event completions as gpusimd reports them (GS_EVENT_DONE), so that
 * cuEventQuery and cuEventElapsedTime answer without a round trip: a real driver
 * reads the completion the GPU wrote to host memory, in well under a microsecond,
 * and code that polls events on every launch (libxcuda's launch gate) must not pay
 * a socket round trip each time here either.
 *
 * A fixed table holds, per event, the latest completed record and when it
 * completed; an event owns the slot its id hashes to, or asks gpusimd as before
 * when another live event holds it. Only the connection's reader writes
 * completions; claims and releases take the table lock so that a completion
 * never lands in a slot that changed hands. "Not yet" is answered from the table
 * only while no synchronisation that covers the record returned since: a sync may
 * return before the completions it waited for arrive. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define EV_TAB 4096u
/* How long after a record "not completed" is answered from the table; later queries ask
 * gpusimd (a round trip each, for long-running work only), so that nothing is stuck on
 * a completion the table missed. */
#define EV_LOCAL_NS 5000000ull

struct ev_slot {
	_Atomic uint32_t id; /* 0: free */
	_Atomic uint64_t gen;
	_Atomic uint64_t at_bits; /* double, ns on gpusimd's clock */
};

static struct ev_slot tab[EV_TAB];
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;

static struct ev_slot *slot_of(uint32_t id) { return &tab[id % EV_TAB]; }

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gs_event_claim(struct CUevent_st *e)
{
	struct ev_slot *s = slot_of(e->id);
	pthread_mutex_lock(&tab_mu);
	e->local = atomic_load(&s->id) == 0;
	if (e->local) {
		atomic_store(&s->gen, 0);
		atomic_store(&s->at_bits, 0);
		atomic_store(&s->id, e->id);
	}
	pthread_mutex_unlock(&tab_mu);
}

void gs_event_release(struct CUevent_st *e)
{
	if (!e->local)
		return;
	pthread_mutex_lock(&tab_mu);
	atomic_store(&slot_of(e->id)->id, 0);
	pthread_mutex_unlock(&tab_mu);
	e->local = 0;
}

void gs_event_done(uint32_t id, uint64_t gen, double at_ns)
{
	struct ev_slot *s = slot_of(id);
	uint64_t bits;
	memcpy(&bits, &at_ns, sizeof bits);
	pthread_mutex_lock(&tab_mu);
	if (id != 0 && atomic_load(&s->id) == id && gen > atomic_load(&s->gen)) {
		/* gen 0 while at_bits changes: a reader between the two sees a torn pair
		 * and asks gpusimd (gs_event_local) */
		atomic_store(&s->gen, 0);
		atomic_store(&s->at_bits, bits);
		atomic_store(&s->gen, gen);
	}
	pthread_mutex_unlock(&tab_mu);
}

/* Records sent so far, in order, and the latest of them that an event synchronisation
 * covered. The completion of a record implies at most that of work submitted before it
 * (on its stream, and on those it waited for), so a synchronisation on one event leaves
 * "not yet" answers for later records as true as they were: a process that keeps a few
 * launches in flight and waits for the oldest (libxcuda's launch gate) would otherwise ask
 * gpusimd about every later one. */
static _Atomic uint64_t rec_seq;
static _Atomic uint64_t synced_upto;

void gs_event_synced(struct CUevent_st *e)
{
	uint64_t seq = atomic_load(&e->rec_seq), cur = atomic_load(&synced_upto);
	while (cur < seq && !atomic_compare_exchange_weak(&synced_upto, &cur, seq)) {
	}
}

void gs_event_recording(struct CUevent_st *e)
{
	/* completions of earlier records first, every 16th record: a process that records
	 * without querying must not let them pile up in its socket */
	static _Atomic unsigned records;
	if ((atomic_fetch_add_explicit(&records, 1, memory_order_relaxed) & 15) == 0)
		gs_drain();
	/* counted before the record is sent: its completion may be read before the send
	 * returns */
	atomic_store(&e->rec_ns, mono_ns());
	atomic_store(&e->rec_syncs, atomic_load(&gs_syncs));
	atomic_store(&e->rec_seq, atomic_fetch_add(&rec_seq, 1) + 1);
	atomic_fetch_add(&e->rec_gen, 1);
}

/* The event's latest record as the completions read so far say: 1 done (*at_ns when),
 * 0 not yet, -1 torn or unknown. */
static int ev_seen(struct CUevent_st *e, uint64_t want, double *at_ns)
{
	struct ev_slot *s = slot_of(e->id);
	uint64_t g1 = atomic_load(&s->gen);
	uint64_t bits = atomic_load(&s->at_bits);
	uint64_t g2 = atomic_load(&s->gen);
	if (g1 == want && g2 == want) {
		memcpy(at_ns, &bits, sizeof *at_ns);
		return 1;
	}
	return g1 == g2 && g2 < want ? 0 : -1;
}

int gs_event_local(struct CUevent_st *e, double *at_ns)
{
	if (!e->local)
		return -1;
	uint64_t want = atomic_load(&e->rec_gen);
	if (want == 0)
		return -1; /* never recorded: gpusimd says what that means for the call */
	/* a completion already read needs no look at the socket */
	if (ev_seen(e, want, at_ns) == 1)
		return 1;
	gs_drain();
	int r = ev_seen(e, want, at_ns);
	if (r == 1)
		return 1;
	if (r == 0 && mono_ns() - atomic_load(&e->rec_ns) < EV_LOCAL_NS &&
	    atomic_load(&e->rec_syncs) == atomic_load(&gs_syncs) &&
	    atomic_load(&e->rec_seq) > atomic_load(&synced_upto))
		return 0;
	return -1;
}
