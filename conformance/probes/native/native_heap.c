// The native heap observer, for conformance/probes/native_heap.py: every byte any library of the
// process allocates during a window, through malloc, calloc, realloc, reallocarray, the aligned
// allocations (posix_memalign, aligned_alloc, memalign, valloc, pvalloc), operator new and
// anonymous mmap / munmap.
//
// Loaded with LD_PRELOAD (the isolation workers' fork server starts with it), so its definitions
// come before glibc's and libstdc++'s: each one calls glibc's own entry (__libc_malloc, ...; mmap
// and munmap as system calls) and, once tracking begins (the exclusions set), keeps each live
// allocation under its pointer in a header-free hash table (requested bytes, the caller's return
// address, the window that made it); while a window is open it also records each allocation and
// free as an event, with the window's live bytes and peak.  glibc calls its own functions
// directly, so an allocation is recorded once, by the call a library made.  Memory a library made
// before a window (a runtime's pool) is known by its pointer (conformance_native_owner).
//
// Callers in excluded code (conformance_native_exclude: the interpreter, torch's libraries, the
// harness's own observer) are not recorded: torch's CPU allocator (c10's alloc_cpu calls
// posix_memalign) is the torch-cpu domain's, and the interpreter's objects are no tensor's bytes.
// A free of a pointer the window did not record is not counted (a foreign free).
//
// Plain C functions for ctypes: conformance_native_{exclude,track,start,stop,pause,resume,count,events,
// live,peak,lost,owner,library}.  An excluded caller costs a range check beyond glibc's own; a
// library's allocation one hash table insertion under a spinlock.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

#define EXPORT __attribute__((visibility("default")))
#define SLOT_BITS 21
#define SLOTS (1u << SLOT_BITS)
#define MAX_EVENTS (1u << 22)
#define MAX_RANGES 256
#define EMPTY ((uintptr_t)0)
#define TOMB ((uintptr_t)1)

// One live allocation of a library (not excluded code), made since tracking began.
struct slot {
  uintptr_t ptr;
  int64_t size;
  uint64_t window;  // the window that made it (0: made outside every window)
  uintptr_t caller;
};

struct event {
  int64_t time_ns;  // CLOCK_REALTIME, the clock of the other domains' probes
  int64_t ptr;
  int64_t size;    // negative: a free
  int64_t caller;  // the return address of the call that allocated (0 for a free)
};

struct range {
  uintptr_t lo, hi;
};

static atomic_int g_on;        // a window is open
static atomic_int g_tracking;  // exclusions are set: libraries' allocations are kept in the table
static atomic_flag g_lock = ATOMIC_FLAG_INIT;
static uint64_t g_epoch;
static struct slot *g_slots;
static uint64_t g_capacity;  // slots in g_slots (a power of two)
static struct event *g_events;
static uint64_t g_used, g_count, g_lost;  // g_used: slots not empty (tombstones included)
static int64_t g_live, g_peak;
static struct range g_ranges[MAX_RANGES];
static int g_nranges;
static char g_patterns[16][512];
static int g_npatterns;
static unsigned long long g_seen_adds;

static inline void lock(void) {
  while (atomic_flag_test_and_set_explicit(&g_lock, memory_order_acquire)) {
  }
}

static inline void unlock(void) { atomic_flag_clear_explicit(&g_lock, memory_order_release); }

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int on(void) { return atomic_load_explicit(&g_on, memory_order_relaxed); }
static inline int tracking(void) { return atomic_load_explicit(&g_tracking, memory_order_relaxed); }

static int excluded(uintptr_t caller) {
  for (int i = 0; i < g_nranges; i++) {
    if (caller >= g_ranges[i].lo && caller < g_ranges[i].hi) return 1;
  }
  return 0;
}

static inline uint64_t slot_of(uintptr_t ptr, uint64_t capacity) {
  return ((uint64_t)(ptr >> 4) * 0x9E3779B97F4A7C15ULL) & (capacity - 1);
}

static void *map_pages(size_t bytes) {
  void *p = (void *)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void put(struct slot *slots, uint64_t capacity, struct slot s) {
  uint64_t i = slot_of(s.ptr, capacity);
  while (slots[i].ptr != EMPTY && slots[i].ptr != TOMB) i = (i + 1) & (capacity - 1);
  slots[i] = s;
}

// Room for one more slot (g_lock held): the table rebuilt without its tombstones, twice as large when
// it is half full of live slots.  0: no room (the allocation is then not kept, and counted as lost).
static int room(void) {
  if (g_slots == NULL) {
    g_slots = map_pages(sizeof(struct slot) * SLOTS);
    if (g_slots == NULL) return 0;
    g_capacity = SLOTS;
  }
  if (g_used + 1 < g_capacity / 4 * 3) return 1;
  uint64_t live = 0;
  for (uint64_t i = 0; i < g_capacity; i++) live += g_slots[i].ptr > TOMB;
  uint64_t capacity = live * 2 >= g_capacity ? g_capacity * 2 : g_capacity;
  struct slot *slots = map_pages(sizeof(struct slot) * capacity);
  if (slots == NULL) return 0;
  for (uint64_t i = 0; i < g_capacity; i++) {
    if (g_slots[i].ptr > TOMB) put(slots, capacity, g_slots[i]);
  }
  syscall(SYS_munmap, g_slots, sizeof(struct slot) * g_capacity);
  g_slots = slots;
  g_capacity = capacity;
  g_used = live;
  return 1;
}

static struct slot *find(uintptr_t ptr) {
  if (g_slots == NULL) return NULL;
  uint64_t i = slot_of(ptr, g_capacity);
  while (g_slots[i].ptr != EMPTY) {
    if (g_slots[i].ptr == ptr) return &g_slots[i];
    i = (i + 1) & (g_capacity - 1);
  }
  return NULL;
}

static void push(int64_t ptr, int64_t size, uintptr_t caller) {
  if (g_events == NULL) return;
  if (g_count < MAX_EVENTS) {
    g_events[g_count++] = (struct event){now_ns(), ptr, size, (int64_t)caller};
  } else {
    g_lost++;
  }
}

static void keep(uintptr_t p, int64_t n, uint64_t window, uintptr_t caller) {
  if (!room()) {
    g_lost++;
    return;
  }
  uint64_t i = slot_of(p, g_capacity);
  while (g_slots[i].ptr != EMPTY && g_slots[i].ptr != TOMB) i = (i + 1) & (g_capacity - 1);
  if (g_slots[i].ptr == EMPTY) g_used++;
  g_slots[i] = (struct slot){p, n, window, caller};
}

static void keep_alloc(void *p, size_t n, void *caller) {
  lock();
  int open = on();
  keep((uintptr_t)p, (int64_t)n, open ? g_epoch : 0, (uintptr_t)caller);
  if (open) {
    g_live += (int64_t)n;
    if (g_live > g_peak) g_peak = g_live;
    push((int64_t)(uintptr_t)p, (int64_t)n, (uintptr_t)caller);
  }
  unlock();
}

static inline void note_alloc(void *p, size_t n, void *caller) {
  if (p == NULL || n == 0 || !tracking() || excluded((uintptr_t)caller)) return;
  keep_alloc(p, n, caller);
}

// An array's data, allocated through numpy's data handler: recorded even though numpy's code is excluded
// (its other allocations, dimensions and caches, are its bookkeeping, not an array's bytes).
static inline void note_array(void *p, size_t n, void *caller) {
  if (p == NULL || n == 0 || !tracking()) return;
  keep_alloc(p, n, caller);
}

// ``p`` freed (``drop`` < 0) or its first ``drop`` bytes unmapped: the slot is taken (the rest of a
// mapping stays, under its new start), and the bytes leave the window's live bytes if it made them.
static void note_free(void *p, int64_t drop) {
  if (p == NULL || !tracking()) return;
  lock();
  struct slot *s = find((uintptr_t)p);
  if (s != NULL) {
    struct slot was = *s;
    int64_t taken = (drop < 0 || drop >= was.size) ? was.size : drop;
    s->ptr = TOMB;
    if (taken < was.size) keep(was.ptr + (uintptr_t)taken, was.size - taken, was.window, was.caller);
    if (on() && was.window == g_epoch) {
      g_live -= taken;
      push((int64_t)(uintptr_t)p, -taken, 0);
    }
  }
  unlock();
}

#define CALLER __builtin_return_address(0)

EXPORT void *malloc(size_t n) {
  void *p = __libc_malloc(n);
  note_alloc(p, n, CALLER);
  return p;
}

EXPORT void *calloc(size_t count, size_t n) {
  void *p = __libc_calloc(count, n);
  note_alloc(p, count * n, CALLER);
  return p;
}

EXPORT void *realloc(void *old, size_t n) {
  void *p = __libc_realloc(old, n);
  if (p != NULL || n == 0) note_free(old, -1);
  note_alloc(p, n, CALLER);
  return p;
}

EXPORT void *reallocarray(void *old, size_t count, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(count, n, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = __libc_realloc(old, total);
  if (p != NULL || total == 0) note_free(old, -1);
  note_alloc(p, total, CALLER);
  return p;
}

EXPORT void free(void *p) {
  note_free(p, -1);
  __libc_free(p);
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t n) {
  if (alignment % sizeof(void *) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0) return EINVAL;
  void *p = __libc_memalign(alignment, n);
  if (p == NULL && n != 0) return ENOMEM;
  *out = p;
  note_alloc(p, n, CALLER);
  return 0;
}

EXPORT void *aligned_alloc(size_t alignment, size_t n) {
  void *p = __libc_memalign(alignment, n);
  note_alloc(p, n, CALLER);
  return p;
}

EXPORT void *memalign(size_t alignment, size_t n) {
  void *p = __libc_memalign(alignment, n);
  note_alloc(p, n, CALLER);
  return p;
}

EXPORT void *valloc(size_t n) {
  void *p = __libc_valloc(n);
  note_alloc(p, n, CALLER);
  return p;
}

EXPORT void *pvalloc(size_t n) {
  void *p = __libc_pvalloc(n);
  note_alloc(p, n, CALLER);
  return p;
}

// operator new (plain and array, throwing and nothrow): recorded with the caller of new, so the bytes
// are the library's that asked for them, not libstdc++'s.  A failed allocation goes to the real
// operator so that it throws (or calls the new-handler) as it would.
typedef void *(*new_fn)(size_t);

static void *new_or_throw(size_t n, const char *real_name, void *caller) {
  void *p = __libc_malloc(n ? n : 1);
  if (p == NULL) {
    new_fn real = (new_fn)dlsym(RTLD_NEXT, real_name);
    p = real(n);
  }
  note_alloc(p, n ? n : 1, caller);
  return p;
}

EXPORT void *_Znwm(size_t n) { return new_or_throw(n, "_Znwm", CALLER); }
EXPORT void *_Znam(size_t n) { return new_or_throw(n, "_Znam", CALLER); }

EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *tag) {
  (void)tag;
  void *p = __libc_malloc(n ? n : 1);
  note_alloc(p, n ? n : 1, CALLER);
  return p;
}

EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *tag) {
  (void)tag;
  void *p = __libc_malloc(n ? n : 1);
  note_alloc(p, n ? n : 1, CALLER);
  return p;
}

// The aligned operator new (C++17: a runtime's tensor buffers, ONNX Runtime's and OpenVINO's): recorded with
// the caller of new, as above.  libstdc++'s own would call aligned_alloc from inside libstdc++, and libstdc++
// is excluded code (its own calls are the std::string and locale bookkeeping of whichever library called it).
typedef void *(*aligned_new_fn)(size_t, size_t);

static void *aligned_new(size_t n, size_t alignment, const char *real_name, int nothrow, void *caller) {
  void *p = __libc_memalign(alignment, n ? n : 1);
  if (p == NULL && !nothrow) {
    aligned_new_fn real = (aligned_new_fn)dlsym(RTLD_NEXT, real_name);
    p = real(n, alignment);
  }
  note_alloc(p, n ? n : 1, caller);
  return p;
}

EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { return aligned_new(n, a, "_ZnwmSt11align_val_t", 0, CALLER); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { return aligned_new(n, a, "_ZnamSt11align_val_t", 0, CALLER); }

EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *tag) {
  (void)tag;
  return aligned_new(n, a, "", 1, CALLER);
}

EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *tag) {
  (void)tag;
  return aligned_new(n, a, "", 1, CALLER);
}

static void *mmap_call(void *addr, size_t n, int prot, int flags, int fd, off_t offset, void *caller) {
  void *p = (void *)syscall(SYS_mmap, addr, n, prot, flags, fd, offset);
  if (p != MAP_FAILED && (flags & MAP_ANONYMOUS)) {
    note_alloc(p, n, caller);
  }
  return p;
}

EXPORT void *mmap(void *addr, size_t n, int prot, int flags, int fd, off_t offset) {
  return mmap_call(addr, n, prot, flags, fd, offset, CALLER);
}

EXPORT void *mmap64(void *addr, size_t n, int prot, int flags, int fd, off_t offset) {
  return mmap_call(addr, n, prot, flags, fd, offset, CALLER);
}

EXPORT int munmap(void *addr, size_t n) {
  int rc = (int)syscall(SYS_munmap, addr, n);
  if (rc == 0) note_free(addr, (int64_t)n);
  return rc;
}

// numpy's data allocator (its default PyDataMem_Handler, NEP 49): numpy keeps freed blocks under 1 KiB
// in a cache of its own and hands them out again, so a small array's bytes would be allocated (or freed)
// when no array is.  conformance_native_numpy points the default handler at these functions, which
// allocate and free every array's data at once, recorded with numpy's own call as the caller (numpy's
// code is excluded for its other allocations: dimensions and their cache are its bookkeeping).
static void rescan(void);

typedef struct {
  void *ctx;
  void *(*malloc)(void *ctx, size_t size);
  void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
  void *(*realloc)(void *ctx, void *ptr, size_t new_size);
  void (*free)(void *ctx, void *ptr, size_t size);
} numpy_allocator;

typedef struct {
  char name[127];
  uint8_t version;
  numpy_allocator allocator;
} numpy_handler;

static void *numpy_malloc(void *ctx, size_t n) {
  (void)ctx;
  void *p = __libc_malloc(n);
  note_array(p, n, CALLER);
  return p;
}

static void *numpy_calloc(void *ctx, size_t count, size_t n) {
  (void)ctx;
  void *p = __libc_calloc(count, n);
  note_array(p, count * n, CALLER);
  return p;
}

static void *numpy_realloc(void *ctx, void *old, size_t n) {
  (void)ctx;
  void *p = __libc_realloc(old, n);
  if (p != NULL || n == 0) note_free(old, -1);
  note_array(p, n, CALLER);
  return p;
}

static void numpy_free(void *ctx, void *p, size_t n) {
  (void)ctx;
  (void)n;
  note_free(p, -1);
  __libc_free(p);
}

EXPORT int conformance_native_numpy(void *handler) {
  numpy_handler *h = (numpy_handler *)handler;
  if (h == NULL || h->version != 1) return -1;
  h->allocator.malloc = numpy_malloc;
  h->allocator.calloc = numpy_calloc;
  h->allocator.realloc = numpy_realloc;
  h->allocator.free = numpy_free;
  return 0;
}

EXPORT void conformance_native_rescan(void) { rescan(); }

// ------------------------------------------------------------------------------------------ the window

static int add_ranges(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  int match = 0;
  for (int k = 0; k < g_npatterns && !match; k++) {
    if (strcmp(g_patterns[k], "<main>") == 0) {
      match = name[0] == '\0';
    } else {
      match = strstr(name, g_patterns[k]) != NULL;
    }
  }
  if (!match) return 0;
  for (int i = 0; i < info->dlpi_phnum && g_nranges < MAX_RANGES; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
      g_ranges[g_nranges++] = (struct range){lo, lo + ph->p_memsz};
    }
  }
  return 0;
}

static int loaded_count(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  *(unsigned long long *)data = info->dlpi_adds;
  return 1;
}

static void rescan(void) {
  g_nranges = 0;
  dl_iterate_phdr(add_ranges, NULL);
}

// Code whose calls are not recorded: every loaded object whose path holds ``pattern`` ("<main>": the
// program itself), and those loaded later (rescanned at each start when objects were loaded since).
EXPORT int conformance_native_exclude(const char *pattern) {
  if (g_npatterns >= 16 || strlen(pattern) >= sizeof(g_patterns[0])) return -1;
  strcpy(g_patterns[g_npatterns++], pattern);
  rescan();
  return g_nranges;
}

// Keep every later allocation of the libraries (not excluded code) in the table, in and out of windows,
// so that memory a library made before a window (a runtime's pool) is known by its pointer.
EXPORT void conformance_native_track(void) { atomic_store(&g_tracking, 1); }

EXPORT int conformance_native_start(void) {
  if (g_events == NULL) {
    g_events = map_pages(sizeof(struct event) * MAX_EVENTS);
    if (g_events == NULL) return -1;
  }
  atomic_store(&g_tracking, 1);
  unsigned long long adds = 0;
  dl_iterate_phdr(loaded_count, &adds);
  if (adds != g_seen_adds) {  // objects loaded since: their code may be excluded too
    g_seen_adds = adds;
    rescan();
  }
  lock();
  g_epoch++;
  g_count = g_lost = 0;
  g_live = g_peak = 0;
  atomic_store(&g_on, 1);
  unlock();
  return 0;
}

EXPORT void conformance_native_stop(void) {
  lock();
  atomic_store(&g_on, 0);
  unlock();
}

// A pause inside a window (the harness copying results): nothing is recorded until resume.
EXPORT void conformance_native_pause(void) { atomic_store(&g_on, 0); }
EXPORT void conformance_native_resume(void) { atomic_store(&g_on, 1); }

EXPORT int64_t conformance_native_count(void) { return (int64_t)g_count; }
EXPORT int64_t conformance_native_live(void) { return g_live; }
EXPORT int64_t conformance_native_peak(void) { return g_peak; }
EXPORT int64_t conformance_native_lost(void) { return (int64_t)g_lost; }

EXPORT void conformance_native_events(int64_t *out) { memcpy(out, g_events, sizeof(struct event) * g_count); }

// The live allocation holding ``address`` that a library made before the open window (or outside every
// window): its start, bytes and caller in ``out``; 0 when none is known.
EXPORT int conformance_native_owner(int64_t address, int64_t *out) {
  int found = 0;
  lock();
  if (g_slots != NULL) {
    struct slot *s = find((uintptr_t)address);
    if (s == NULL) {
      for (uint64_t i = 0; i < g_capacity; i++) {
        struct slot *c = &g_slots[i];
        if (c->ptr > TOMB && (uintptr_t)address >= c->ptr && (uintptr_t)address < c->ptr + (uintptr_t)c->size) {
          s = c;
          break;
        }
      }
    }
    if (s != NULL && s->window != g_epoch) {
      out[0] = (int64_t)s->ptr;
      out[1] = s->size;
      out[2] = (int64_t)s->caller;
      found = 1;
    }
  }
  unlock();
  return found;
}

// The file of the loaded object holding ``address`` (NULL: none).
EXPORT const char *conformance_native_library(int64_t address) {
  Dl_info info;
  if (dladdr((void *)(uintptr_t)address, &info) == 0 || info.dli_fname == NULL) return NULL;
  return info.dli_fname;
}
