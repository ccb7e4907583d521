"""The CPU's HCQ2 queue: a worker thread (in C) running entries from a ring, so Python returns before kernels finish.

Each entry is 64 64-bit words: a function address, a flags word, then up to 62 argument words. A call with more
arguments continues in the entries after it (64 argument words each; the flags word counts them), so a kernel takes
any number of buffers and scalars. Every entry function is called as `fn(args, share, shares)` with a pointer to
its argument words. The worker sleeps on a semaphore, calls the entry's function and bumps `done` past it. Kernels
are entries whose function is the kernel's argument-table entry point (`renderer.ENTRY_SUFFIX`); signal stores,
waits and timestamps are small helper functions compiled with the worker. A Barrier needs nothing: one thread runs
the entries in order.
"""
from __future__ import annotations
import ctypes
import threading
import warnings
import time
from typing import Any, Sequence
from tinycore.plugin import (Barrier, CommandWriter, Copy, Encoded, Exec, HCQTimeoutError, HWQueue, SignalStore,
                             SignalWait, Timestamp, Value, raise_timeout_hint)
from tiny_cpu.kernel_source import kernel_iterations

ENTRY_WORDS = 64
RING_ENTRIES = 16 * 1024

WORKER_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <limits.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif
typedef struct {
  volatile uint64_t put;     /* entries made available by the host */
  volatile uint64_t done;    /* entries the worker finished */
  uint64_t slots;
  uint64_t *ring;
  volatile int stop;         /* set by the host: leave after the entry now running (queued entries are dropped) */
  volatile int exited;       /* set by the worker as it leaves */
  int sleeping;              /* the worker is (about to be) asleep on sem: a submission must post it */
  sem_t sem;
  pthread_t thread;
} tc_queue;
/* an entry: word 0 the function, word 1 the flags (bit 0: may run inline; bits 8-31: continuation entries), then
   the argument words, which run on through the continuation entries */
typedef void (*tc_fn)(const uint64_t *args, uint64_t share, uint64_t shares);
#define TC_WORDS 64
#define TC_CONTINUED(e) (((e)[1] >> 8) & 0xffffff)
/* run the entry at ring slot `at`; returns how many slots it takes */
static uint64_t tc_run_slot(const uint64_t *ring, uint64_t slots, uint64_t at) {
  const uint64_t *e = ring + at * TC_WORDS;
  uint64_t more = TC_CONTINUED(e);
  if (at + more < slots) { ((tc_fn)e[0])(e + 2, 0, 1); return 1 + more; }
  /* the argument words wrap around the ring's end: gather them first */
  uint64_t head = (slots - at) * TC_WORDS - 2, total = (1 + more) * TC_WORDS - 2;
  uint64_t *args = (uint64_t *)malloc(total * 8);
  memcpy(args, e + 2, head * 8);
  memcpy(args + head, ring, (total - head) * 8);
  ((tc_fn)e[0])(args, 0, 1);
  free(args);
  return 1 + more;
}
static void *tc_worker(void *arg) {
  tc_queue *q = (tc_queue *)arg;
  for (;;) {
    if (q->stop) break;
    if (q->done == __atomic_load_n(&q->put, __ATOMIC_SEQ_CST)) {
      /* no work: announce the sleep, then look again (a submission between the two saw no sleeper and did not
         post); a stale post only wakes the loop once more */
      __atomic_store_n(&q->sleeping, 1, __ATOMIC_SEQ_CST);
      if (q->done == __atomic_load_n(&q->put, __ATOMIC_SEQ_CST) && !q->stop) while (sem_wait(&q->sem) != 0) {}
      __atomic_store_n(&q->sleeping, 0, __ATOMIC_SEQ_CST);
      continue;
    }
    uint64_t taken = tc_run_slot(q->ring, q->slots, q->done % q->slots);
    __atomic_store_n(&q->done, q->done + taken, __ATOMIC_RELEASE);
  }
  __atomic_store_n(&q->exited, 1, __ATOMIC_RELEASE);
  return 0;
}
tc_queue *tc_queue_new(uint64_t slots) {
  tc_queue *q = (tc_queue *)calloc(1, sizeof(tc_queue));
  q->slots = slots;
  q->ring = (uint64_t *)calloc(slots * 64, 8);
  sem_init(&q->sem, 0, 0);
  if (pthread_create(&q->thread, 0, tc_worker, q) != 0) { free(q->ring); free(q); return 0; }
  return q;
}
/* copy n entries into the ring at the put position (wrapping around) and make them available: one wake-up per
   submission, and only when the worker sleeps (a futex call costs more than a tiny kernel) */
void tc_queue_submit(tc_queue *q, const uint64_t *entries, uint64_t n) {
  uint64_t first = q->put % q->slots, head = n < q->slots - first ? n : q->slots - first;
  memcpy(q->ring + first * 64, entries, head * 64 * 8);
  if (head < n) memcpy(q->ring, entries + head * 64, (n - head) * 64 * 8);
  __atomic_store_n(&q->put, q->put + n, __ATOMIC_SEQ_CST);
  if (__atomic_exchange_n(&q->sleeping, 0, __ATOMIC_SEQ_CST)) sem_post(&q->sem);
}
void tc_signal_wait(const uint64_t *a, uint64_t share, uint64_t shares);
/* run a submission on the calling thread instead, when that cannot change what happens: the worker is idle (so
   nothing queued runs after it), every entry is marked inline-able (flag bit 0: a tiny kernel or copy, a signal or
   timestamp) and every wait is already satisfied. Returns 0, having run nothing, otherwise: submit it then. A
   tiny kernel costs less than waking the worker would. */
int tc_queue_run_inline(tc_queue *q, const uint64_t *entries, uint64_t n) {
  if (__atomic_load_n(&q->done, __ATOMIC_ACQUIRE) != q->put) return 0;
  for (uint64_t i = 0; i < n; i += 1 + TC_CONTINUED(entries + i * TC_WORDS)) {
    const uint64_t *e = entries + i * TC_WORDS;
    if (!(e[1] & 1)) return 0;
    if (e[0] == (uint64_t)tc_signal_wait && __atomic_load_n((uint64_t *)e[2], __ATOMIC_ACQUIRE) < e[3]) return 0;
  }
  for (uint64_t i = 0; i < n;) i += tc_run_slot(entries, n, i);
  return 1;
}
uint64_t tc_queue_done(tc_queue *q) { return __atomic_load_n(&q->done, __ATOMIC_ACQUIRE); }
uint64_t *tc_queue_ring(tc_queue *q) { return q->ring; }
/* stopping is asked (tc_queue_stop), watched (tc_queue_exited) and then joined, so the host can bound the wait */
void tc_queue_stop(tc_queue *q) {
  __atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
  sem_post(&q->sem);
}
int tc_queue_exited(tc_queue *q) { return __atomic_load_n(&q->exited, __ATOMIC_ACQUIRE); }
void tc_queue_join(tc_queue *q) { pthread_join(q->thread, 0); }
/* in a forked child only the forking thread exists: start the worker again (the ring and counters are copies) */
void tc_queue_restart(tc_queue *q) {
  sem_init(&q->sem, 0, 0);
  q->stop = 0; q->exited = 0; q->sleeping = 0;
  pthread_create(&q->thread, 0, tc_worker, q);
}
/* A host thread that waited long sleeps on this futex word (tc_host_wait); every signal store bumps it and wakes the
   sleepers, but only while there are any: the store, then the count (sequentially consistent, as the sleeper counts
   itself, then reads the word, then the signal: either the store sees the sleeper or the sleeper sees the value). */
static uint32_t tc_wake_word;
static int tc_host_sleepers;
/* the helpers' arguments: a[0] a signal (or destination) address, then their values */
void tc_signal_store(const uint64_t *a, uint64_t share, uint64_t shares) {
  __atomic_store_n((uint64_t *)a[0], a[1], __ATOMIC_SEQ_CST);
#ifdef __linux__
  if (__atomic_load_n(&tc_host_sleepers, __ATOMIC_SEQ_CST)) {
    __atomic_add_fetch(&tc_wake_word, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &tc_wake_word, FUTEX_WAKE_PRIVATE, INT_MAX, 0, 0, 0);
  }
#endif
}
void tc_signal_wait(const uint64_t *a, uint64_t share, uint64_t shares) {
  uint64_t *signal = (uint64_t *)a[0], value = a[1];
  tc_queue *q = (tc_queue *)a[2];
  for (uint64_t spins = 0; __atomic_load_n(signal, __ATOMIC_ACQUIRE) < value && !q->stop; spins++) {
    if (spins < 256) sched_yield();
    else { struct timespec pause = {0, 20000}; nanosleep(&pause, 0); }
  }
}
void tc_timestamp(const uint64_t *a, uint64_t share, uint64_t shares) {
  struct timespec now; clock_gettime(CLOCK_MONOTONIC, &now);
  __atomic_store_n((uint64_t *)a[0], (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec, __ATOMIC_RELEASE);
}
/* block the calling (host) thread until *signal >= value or timeout_ns passed; 1 if the value was reached. Called
   through ctypes, which releases the GIL. From `futex_after_ns` on (Linux; 0 by default) it sleeps on tc_wake_word
   until a signal store wakes it, in slices of at most 1 ms (a signal stored by another path than tc_signal_store is
   still seen within 1 ms); before that, or elsewhere, it sleeps in steps of 1/16 of the time waited (20 us to 1 ms)
   at a low timer slack (50 us by default, which made Python's 50 us polls ~100 us). The steps overslept a 5 ms
   kernel by ~0.2 ms on average. Idle threads that spin before sleeping lost their core on a loaded 2-core VM. */
int tc_host_wait(uint64_t *signal, uint64_t value, uint64_t timeout_ns, uint64_t futex_after_ns) {
  if (__atomic_load_n(signal, __ATOMIC_ACQUIRE) >= value) return 1;
#ifdef __linux__
  int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
  prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
#endif
  struct timespec now; clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t start = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec, waited = 0;
  while (__atomic_load_n(signal, __ATOMIC_ACQUIRE) < value && waited < timeout_ns) {
#ifdef __linux__
    if (waited >= futex_after_ns) {
      uint64_t left = timeout_ns - waited;
      struct timespec slice = {0, (long)(left < 1000000 ? left : 1000000)};
      __atomic_add_fetch(&tc_host_sleepers, 1, __ATOMIC_SEQ_CST);
      uint32_t seen = __atomic_load_n(&tc_wake_word, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(signal, __ATOMIC_SEQ_CST) < value)
        syscall(SYS_futex, &tc_wake_word, FUTEX_WAIT_PRIVATE, seen, &slice, 0, 0);
      __atomic_sub_fetch(&tc_host_sleepers, 1, __ATOMIC_SEQ_CST);
    } else
#endif
    {
      uint64_t step = waited / 16 < 20000 ? 20000 : waited / 16 > 1000000 ? 1000000 : waited / 16;
      struct timespec pause = {0, (long)step};
      nanosleep(&pause, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    waited = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec - start;
  }
#ifdef __linux__
  if (slack > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
#endif
  return __atomic_load_n(signal, __ATOMIC_ACQUIRE) >= value;
}
void tc_memcpy(const uint64_t *a, uint64_t share, uint64_t shares) { memmove((void *)a[0], (const void *)a[1], a[2]); }

/* threaded kernels: a kernel's outermost loop is cut into `shares` (core_id and core_count, passed after the
   kernel's argument table, are a share's index and the share count), and the worker and the helper threads take
   shares from one ticket word until none is left; the entry finishes when every share is done. More shares than
   threads keep every core busy to the end when a thread starts late (a helper waking up while the host's Python
   thread holds the other core) or loses its core meanwhile. The worker waits for the shares, not for the helpers:
   a helper that wakes after all shares were taken sees so in the ticket and touches nothing else (a small kernel
   does not wait for it). */
typedef struct { struct tc_pool *pool; uint64_t core; sem_t go; pthread_t thread; } tc_helper;
typedef struct tc_pool {
  uint64_t threads, fn;
  const uint64_t *args;        /* the running kernel's argument words (in its entry, which stays put meanwhile) */
  volatile uint64_t ticket;    /* the share count << 32 | the next share's index (taken by fetch-and-add) */
  volatile uint64_t finished;  /* shares of the running kernel done */
  tc_helper *helpers;
} tc_pool;
static void tc_share(tc_pool *p, uint64_t share, uint64_t shares) { ((tc_fn)p->fn)(p->args, share, shares); }
/* run shares while there are any. A share taken is one of the kernel the ticket belonged to at that moment, whose
   arguments stay put until its last share is done (the worker publishes the arguments before the ticket) */
static void tc_take_shares(tc_pool *p) {
  for (;;) {
    uint64_t seen = __atomic_load_n(&p->ticket, __ATOMIC_ACQUIRE);
    if ((seen & 0xffffffffu) >= (seen >> 32)) return;  /* none left: a late helper leaves without touching more */
    uint64_t ticket = __atomic_fetch_add(&p->ticket, 1, __ATOMIC_ACQ_REL);
    uint64_t share = ticket & 0xffffffffu, shares = ticket >> 32;
    if (share >= shares) return;
    tc_share(p, share, shares);
    __atomic_add_fetch(&p->finished, 1, __ATOMIC_ACQ_REL);
  }
}
static void *tc_helper_main(void *arg) {
  tc_helper *h = (tc_helper *)arg;
  for (;;) {
    while (sem_wait(&h->go) != 0) {}
    tc_take_shares(h->pool);
  }
  return 0;
}
tc_pool *tc_pool_new(uint64_t threads) {
  tc_pool *p = (tc_pool *)calloc(1, sizeof(tc_pool));
  p->threads = threads;
  p->helpers = (tc_helper *)calloc(threads, sizeof(tc_helper));
  /* a helper the system cannot start ends the pool there: the threads started take every share (tc_pool_threads) */
  for (uint64_t i = 1; i < threads; i++) {
    p->helpers[i].pool = p; p->helpers[i].core = i;
    sem_init(&p->helpers[i].go, 0, 0);
    if (pthread_create(&p->helpers[i].thread, 0, tc_helper_main, &p->helpers[i]) != 0) { p->threads = i; break; }
  }
  return p;
}
uint64_t tc_pool_threads(tc_pool *p) { return p->threads; }
void tc_pool_restart(tc_pool *p) {
  p->ticket = 0; p->finished = 0;
  for (uint64_t i = 1; i < p->threads; i++) {
    sem_init(&p->helpers[i].go, 0, 0);
    if (pthread_create(&p->helpers[i].thread, 0, tc_helper_main, &p->helpers[i]) != 0) { p->threads = i; break; }
  }
}
/* a threaded kernel's entry: a[0] the pool, a[1] the kernel's entry point, a[2] the share count, then the kernel's
   argument words */
void tc_parallel(const uint64_t *a, uint64_t unused_share, uint64_t unused_shares) {
  tc_pool *p = (tc_pool *)a[0];
  uint64_t shares = a[2];
  p->fn = a[1]; p->args = a + 3;
  __atomic_store_n(&p->finished, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&p->ticket, shares << 32, __ATOMIC_RELEASE);  /* the arguments, then the shares to take */
  for (uint64_t i = 1; i < p->threads; i++) sem_post(&p->helpers[i].go);
  tc_take_shares(p);
  for (uint64_t spins = 0; __atomic_load_n(&p->finished, __ATOMIC_ACQUIRE) < shares; spins++)
    if (spins > 64) sched_yield();
}
"""
ARGUMENT_WORDS = ENTRY_WORDS - 2  # an entry's argument words after its function and flags (more continue after it)
INLINE_FLAG = 1                   # flags bit: the entry may run on the submitting thread (tc_queue_run_inline)
CONTINUED_SHIFT = 8               # flags bits 8-31: how many continuation entries follow
# a kernel of at most this many loop iterations (a few microseconds) runs on the submitting thread when the worker is
# idle: waking the worker (a futex call and a context switch, far more on a busy machine) costs more than the kernel
INLINE_MAX_ITERATIONS = 1 << 14
INLINE_MAX_COPY_BYTES = 1 << 16
# a host wait longer than this sleeps until the worker's signal store wakes it (tc_host_wait); shorter ones poll.
# Measured on the 2-core VM (sum of 1 MB, 4 MB, 16 MB rows: whole realize + synchronize): woken at once 76, 113,
# 241 us; polling the first 100 us 85, 123, 225 us; polling only 85, 123, 238 us
HOST_WAIT_FUTEX_AFTER_NS = 0


class WorkerLibrary:
  """The compiled worker and helper functions (one per process)."""
  _instance: WorkerLibrary | None = None

  def __init__(self, compiler: Any):
    from tiny_cpu.device import load_shared_object
    source = WORKER_SOURCE
    lib = load_shared_object(compiler.compile_cached(source))
    self.lib = lib
    lib.tc_queue_new.restype = ctypes.c_void_p
    lib.tc_queue_new.argtypes = [ctypes.c_uint64]
    lib.tc_queue_submit.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    lib.tc_queue_run_inline.restype = ctypes.c_int
    lib.tc_queue_run_inline.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64]
    lib.tc_queue_done.restype = ctypes.c_uint64
    lib.tc_queue_done.argtypes = [ctypes.c_void_p]
    lib.tc_queue_ring.restype = ctypes.c_void_p
    lib.tc_queue_ring.argtypes = [ctypes.c_void_p]
    lib.tc_queue_stop.argtypes = [ctypes.c_void_p]
    lib.tc_queue_exited.restype = ctypes.c_int
    lib.tc_queue_exited.argtypes = [ctypes.c_void_p]
    lib.tc_queue_join.argtypes = [ctypes.c_void_p]
    lib.tc_queue_restart.argtypes = [ctypes.c_void_p]
    lib.tc_pool_new.restype = ctypes.c_void_p
    lib.tc_pool_new.argtypes = [ctypes.c_uint64]
    lib.tc_pool_restart.argtypes = [ctypes.c_void_p]
    lib.tc_pool_threads.restype = ctypes.c_uint64
    lib.tc_pool_threads.argtypes = [ctypes.c_void_p]
    lib.tc_host_wait.restype = ctypes.c_int
    lib.tc_host_wait.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64]
    self.address = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                    for name in ("tc_signal_store", "tc_signal_wait", "tc_timestamp", "tc_memcpy", "tc_parallel")}

  _lock = threading.Lock()

  @classmethod
  def get(cls, compiler: Any) -> WorkerLibrary:
    with cls._lock:
      if cls._instance is None: cls._instance = WorkerLibrary(compiler)
    return cls._instance


class CPUQueue(HWQueue):
  """A ring of 16Ki entries run by one worker thread."""
  patched_signal_values = True  # an entry's words are patched alike, whatever they are

  def __init__(self, device: Any, kind: str, worker: WorkerLibrary, threads: int = 1):
    super().__init__(device, kind)
    self.worker = worker
    self.pool = worker.lib.tc_pool_new(threads) if threads > 1 else None
    if self.pool and (started := worker.lib.tc_pool_threads(self.pool)) < threads:
      warnings.warn(f"{device.device}: the system started {started} of the {threads} threads asked for; the ones "
                    "started run every kernel's shares", stacklevel=2)
    self.handle = worker.lib.tc_queue_new(RING_ENTRIES)
    if not self.handle: raise RuntimeError(f"{device.device}: the system could not start the queue's worker thread")
    self.ring = worker.lib.tc_queue_ring(self.handle)
    self.put = 0
    self.lock = threading.Lock()  # the ring's put counter: one submitter at a time
    self.closed = False

  @property
  def done(self) -> int: return self.worker.lib.tc_queue_done(self.handle)

  def _entry(self, out: CommandWriter, function: int, args: Sequence[Value], inline: bool = True) -> None:
    """One call: its entry, and as many continuation entries as its arguments need."""
    continued = max(0, -(-(len(args) - ARGUMENT_WORDS) // ENTRY_WORDS))
    flags = (INLINE_FLAG if inline else 0) | continued << CONTINUED_SHIFT
    out.words([function, flags, *args], pad_to=ENTRY_WORDS * (1 + continued))

  def exec(self, out: CommandWriter, command: Exec) -> None:
    args = [*command.buffers, *command.vals]
    if command.global_size[0] > 1:  # a threaded kernel: every core runs its share, then the entry is done
      if self.pool is None: raise RuntimeError(f"{self.device.device} has no thread pool for a threaded kernel")
      self._entry(out, self.worker.address["tc_parallel"],
                  [self.pool, command.program.program.address, command.global_size[0], *args], inline=False)
    else:
      iterations = kernel_iterations(getattr(command.program, "source", ""))
      tiny = iterations is not None and iterations <= INLINE_MAX_ITERATIONS
      self._entry(out, command.program.program.address, args, inline=tiny)

  def copy(self, out: CommandWriter, command: Copy) -> None:
    self._entry(out, self.worker.address["tc_memcpy"], [command.dst, command.src, command.nbytes],
                inline=command.nbytes <= INLINE_MAX_COPY_BYTES)

  def signal(self, out: CommandWriter, command: SignalStore) -> None:
    self._entry(out, self.worker.address["tc_signal_store"], [command.signal.addr, command.value])

  def wait(self, out: CommandWriter, command: SignalWait) -> None:  # inline only when already satisfied
    self._entry(out, self.worker.address["tc_signal_wait"], [command.signal.addr, command.value, self.handle])

  def timestamp(self, out: CommandWriter, command: Timestamp) -> None:
    self._entry(out, self.worker.address["tc_timestamp"], [command.signal.addr])

  def barrier(self, out: CommandWriter, command: Barrier) -> None:
    pass  # one worker runs entries in order: nothing to do

  def submit(self, encoded: Encoded, values: dict[Any, int]) -> None:
    count = len(encoded.blob) // (ENTRY_WORDS * 8)  # ring entries (a call with many arguments takes several)
    if count == 0: return
    if count > RING_ENTRIES: raise ValueError(f"a submission of {count} entries does not fit a ring of {RING_ENTRIES}")
    data = encoded.patched(values)
    with self.lock:
      if self.closed: raise RuntimeError(f"{self.device.device}: the {self.kind} queue was stopped (at exit)")
      entries = bytes(data)
      if self.worker.lib.tc_queue_run_inline(self.handle, entries, count): return
      self._wait_for_room(count)
      self.worker.lib.tc_queue_submit(self.handle, entries, count)
      self.put += count

  def _wait_for_room(self, count: int) -> None:
    start = time.perf_counter()
    while self.put - self.done > RING_ENTRIES - count:
      if time.perf_counter() - start > self.device.wait_timeout_ms / 1000:
        raise HCQTimeoutError(f"{self.device.device}: the {self.kind} ring stayed full ({self.put - self.done} entries "
                              f"pending) for {self.device.wait_timeout_ms} ms; {raise_timeout_hint()}")
      time.sleep(0.0001)

  def __repr__(self) -> str: return f"put={self.put} done={self.done}"

  def close(self, timeout_s: float) -> bool:
    """Stop the worker after the entry it is running (queued entries are dropped). True once it left; False if it
    was still running an entry after `timeout_s` (it is then left running, never joined)."""
    with self.lock:
      if self.closed: return True
      self.closed = True
    self.worker.lib.tc_queue_stop(self.handle)
    deadline = time.perf_counter() + timeout_s
    while not self.worker.lib.tc_queue_exited(self.handle):
      if time.perf_counter() > deadline: return False
      time.sleep(0.001)
    self.worker.lib.tc_queue_join(self.handle)
    return True

  def restart_after_fork(self) -> None:
    """In a forked child: start the worker (and kernel helper) threads again; the ring is the parent's copy, idle."""
    self.lock = threading.Lock()
    if self.closed: return
    self.worker.lib.tc_queue_restart(self.handle)
    if self.pool is not None: self.worker.lib.tc_pool_restart(self.pool)
