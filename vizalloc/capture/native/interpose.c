/*
 * vizalloc's capture library: preloaded into an unmodified ggml process (LD_PRELOAD), it
 * defines ggml's exported allocator, scheduler and buffer functions, records what each call
 * saw and did, and forwards to the real function.
 *
 * Why this works: ggml's shared libraries call their own exported functions through the
 * PLT, so a preloaded definition is found first, also for calls inside libggml-base. A
 * library that Python loaded with RTLD_LOCAL (ggml-python, xllamacpp) is invisible to
 * dlsym(RTLD_NEXT), so the real function is found by walking the loaded objects.
 *
 * What is recorded (format: vizalloc/capture/rawfile.py, which is the one reader):
 * raw `struct ggml_tensor` bytes of every tensor a call touches (only when they changed
 * since they were last written, so a placement is one small record), the node and leaf
 * lists of every planned or computed graph, buffers with base/size/usage, buffer types,
 * and the names ggml itself gives to types and ops. Interpretation of the bytes happens
 * in Python against a layout that this file checks with ggml's own accessors first.
 *
 * Durability: records are copied into a shared memory map of the capture file (see
 * "output"): what was recorded survives a SIGKILL, a crash and an exec, and no signal
 * handler is installed.
 *
 * Processes: each process image writes its own file, capture.<pid>.<image>.vzcap (image 0,
 * then 1, 2, ... after each exec); a forked child starts a complete capture of its own,
 * describing again whatever the parent had described (libraries, graph allocators,
 * schedulers, and lazily every buffer type, buffer, tensor, type and op it meets). Records
 * name the thread they come from (R_THREAD before a change of thread), and each thread
 * keeps its own call stack (t_call, and the saved values in each hook's frame).
 *
 * Nothing here may change the program's results: every hook forwards its arguments
 * untouched and returns the real function's result; recording failures disable recording.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define VZ_EXPORT __attribute__((visibility("default")))
#define VZ_LOCAL static

/* ------------------------------------------------------------------------------------ */
/* record kinds, call kinds, placement and access kinds: rawfile.RecordKind, CallKind,    */
/* PlaceKind and IoKind are the same table (tests/capture/test_format.py compares them)  */

enum {
    R_HELLO = 1,        /* pid, ppid, t_ns, exe path */
    R_LIBRARY = 2,      /* lib id, status, tensor size, graph layout ok, version, commit, path, reason */
    R_TYPE = 3,         /* lib, type id, blck size, type size, name */
    R_OP = 4,           /* lib, family (0 op, 1 unary, 2 glu), id, name */
    R_BUFT = 5,         /* lib, buft, alignment, max size, is host, name */
    R_BUFFER = 6,       /* lib, buffer, buft, base, size, usage, how, owner galloc, call id */
    R_BUFFER_FREE = 7,  /* buffer, call id */
    R_BUFFER_CLEAR = 8, /* buffer, value */
    R_BUFFER_USAGE = 9, /* buffer, usage */
    R_TENSOR = 10,      /* lib, address, raw struct bytes */
    R_CALL = 11,        /* begin: call id, parent call, kind, lib, object, graph, t_ns, payload */
    R_RETURN = 12,      /* call id, kind, result, t_ns, payload */
    R_PLACE = 13,       /* call id, kind (tensor_alloc / view_init), tensor, buffer, address, result */
    R_GALLOC = 14,      /* lib, galloc, sched, n, bufts[n] */
    R_SCHED = 15,       /* lib, sched, n backends, galloc?, per backend: backend ptr, buft, name */
    R_BYE = 16,         /* counts, loaded objects defining ggml */
    R_NOTE = 17,        /* free text: something the capture could not do */
    R_ALLOC_SIZE = 18,  /* lib, buft, tensor, alloc size (only where it differs from ggml_nbytes) */
    R_BACKEND = 19,     /* lib, backend, name */
    R_IO = 20,          /* kind (set, get, memset, copy), tensor, offset, size, source tensor (copy) */
    R_THREAD = 21,      /* thread id: the records that follow come from that thread */
};

enum {
    C_GALLOC_RESERVE_N = 1,
    C_GALLOC_ALLOC_GRAPH = 2,
    C_GALLOC_RESERVE_N_SIZE = 3,
    C_GALLOC_FREE = 4,
    C_SCHED_RESERVE = 5,
    C_SCHED_ALLOC_GRAPH = 6,
    C_SCHED_RESET = 7,
    C_SCHED_COMPUTE = 8,
    C_SCHED_COMPUTE_ASYNC = 9,
    C_BACKEND_COMPUTE = 10,
    C_BACKEND_COMPUTE_ASYNC = 11,
    C_SCHED_RESERVE_SIZE = 12,
    C_SCHED_FREE = 13,
    C_BUFT_ALLOC_BUFFER = 14,
    C_BUFFER_RESET = 15,
    C_GRAPH_COMPUTE = 16,          /* ggml-cpu's own compute, with or without a backend */
    C_GRAPH_COMPUTE_WITH_CTX = 17,
    C_ALLOC_CTX_TENSORS = 18,      /* ggml's tensor allocator over a context, into new buffers */
};

enum { PLACE_TENSOR_ALLOC = 1, PLACE_VIEW_INIT = 2 };
enum { IO_SET = 1, IO_GET = 2, IO_MEMSET = 3, IO_COPY = 4 };

/* ------------------------------------------------------------------------------------ */
/* the tensor and graph layouts this file knows (ggml 0.15.3 ... 0.26.0: identical);      */
/* layout.FIELDS is the same table (tests/capture/test_format.py compares them)          */

#define TENSOR_SIZE_KNOWN 336
#define OFF_TYPE 0
#define OFF_BUFFER 8
#define OFF_NE 16
#define OFF_NB 48
#define OFF_OP 80
#define OFF_OP_PARAMS 84
#define OFF_FLAGS 148
#define OFF_SRC 152
#define OFF_VIEW_SRC 232
#define OFF_VIEW_OFFS 240
#define OFF_DATA 248
#define OFF_NAME 256
#define MAX_SRC 10
#define GGML_OBJECT_SIZE 32
/* struct ggml_cgraph: int size, n_nodes, n_leafs; then nodes, grads, grad_accs, leafs */
#define G_OFF_SIZE 0
#define G_OFF_N_NODES 4
#define G_OFF_N_LEAFS 8
#define G_OFF_NODES 16
#define G_OFF_LEAFS 40
#define OP_UNARY_NAME "UNARY"
#define OP_GLU_NAME "GLU"

#define RD(T, p, off) (*(T *)((const char *)(p) + (off)))

/* ------------------------------------------------------------------------------------ */
/* the real functions and ggml's accessors, per loaded ggml (a process may hold several)  */

typedef void *ptr;
typedef struct {
    int id;
    void *handle;
    void *base; /* where the object is loaded */
    uintptr_t lo, hi; /* the span of its loaded segments: calls from inside it need no dladdr */
    char path[PATH_MAX];
    int status; /* 0 unchecked, 1 layout ok, -1 refused */
    int graph_ok;
    /* hooked */
    ptr (*gallocr_new)(ptr);
    ptr (*gallocr_new_n)(ptr *, int);
    void (*gallocr_free)(ptr);
    bool (*gallocr_reserve)(ptr, ptr);
    bool (*gallocr_reserve_n)(ptr, ptr, const int *, const int *);
    void (*gallocr_reserve_n_size)(ptr, ptr, const int *, const int *, size_t *);
    bool (*gallocr_alloc_graph)(ptr, ptr);
    ptr (*sched_new)(ptr *, ptr *, int, size_t, bool, bool);
    void (*sched_free)(ptr);
    bool (*sched_reserve)(ptr, ptr);
    void (*sched_reserve_size)(ptr, ptr, size_t *);
    bool (*sched_alloc_graph)(ptr, ptr);
    void (*sched_reset)(ptr);
    int (*sched_graph_compute)(ptr, ptr);
    int (*sched_graph_compute_async)(ptr, ptr);
    int (*backend_graph_compute)(ptr, ptr);
    int (*backend_graph_compute_async)(ptr, ptr);
    ptr (*buft_alloc_buffer)(ptr, size_t);
    void (*buffer_free)(ptr);
    void (*buffer_clear)(ptr, uint8_t);
    void (*buffer_set_usage)(ptr, int);
    void (*buffer_reset)(ptr);
    int (*tensor_alloc)(ptr, ptr, ptr);
    int (*view_init)(ptr);
    void (*tensor_set)(ptr, const void *, size_t, size_t);
    void (*tensor_get)(const void *, void *, size_t, size_t);
    void (*tensor_set_async)(ptr, ptr, const void *, size_t, size_t);
    void (*tensor_get_async)(ptr, const void *, void *, size_t, size_t);
    void (*tensor_memset)(ptr, uint8_t, size_t, size_t);
    void (*tensor_copy)(ptr, ptr);
    /* accessors (never hooked) */
    const char *(*version)(void);
    const char *(*commit)(void);
    size_t (*tensor_overhead)(void);
    size_t (*nbytes)(const void *);
    const char *(*get_name)(const void *);
    int64_t (*blck_size)(int);
    size_t (*type_size)(int);
    const char *(*type_name)(int);
    const char *(*op_name)(int);
    const char *(*unary_op_name)(int);
    const char *(*glu_op_name)(int);
    int (*graph_n_nodes)(ptr);
    ptr *(*graph_nodes)(ptr);
    int (*graph_size)(ptr);
    ptr (*buffer_get_base)(ptr);
    size_t (*buffer_get_size)(ptr);
    ptr (*buffer_get_type)(ptr);
    int (*buffer_get_usage)(ptr);
    bool (*buffer_is_multi)(ptr);
    const char *(*buft_name)(ptr);
    size_t (*buft_get_alignment)(ptr);
    size_t (*buft_get_max_size)(ptr);
    size_t (*buft_get_alloc_size)(ptr, const void *);
    bool (*buft_is_host)(ptr);
    const char *(*backend_name)(ptr);
    ptr (*backend_get_default_buffer_type)(ptr);
    int (*sched_get_n_splits)(ptr);
    int (*sched_get_n_backends)(ptr);
    ptr (*sched_get_backend)(ptr, int);
    ptr (*sched_get_tensor_backend)(ptr, ptr);
    ptr (*sched_get_buffer_type)(ptr, ptr);
    size_t tensor_struct_size; /* struct ggml_tensor's size when not the known one (another GGML_MAX_NAME) */
    void *real_alloc_ctx_tensors; /* ggml_backend_alloc_ctx_tensors_from_buft, found on first use */
    char reason[256]; /* why it was refused (status -1) */
    int noted_range;  /* a type or op id outside the tables below was noted (once) */
    /* names already written (in this image) */
    unsigned char type_seen[256];
    unsigned char op_seen[3][256];
} ggml_lib;

/* every ggml found, never freed (call sites keep pointers to them) */
VZ_LOCAL ggml_lib **g_libs;
VZ_LOCAL int g_n_libs, g_libs_cap;
VZ_LOCAL pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------------------ */
/* output: one file per process image, written through a memory map                      */

/* Records are copied straight into a shared mapping of the capture file, and the header's
 * `end` field (the length of the complete records) is stored after each one. What was
 * written is in the page cache the moment it is copied: a SIGKILL, a crash or an exec
 * loses nothing, so no signal handler has to write. The file grows a window at a time;
 * the reader stops at `end` (bytes after it are a window's zero fill, or a record cut
 * short by a kill mid-copy). Measured against the buffer this replaced (written out at
 * every compute's end and every 100 ms): a placement costs more (a page fault per 4 KiB
 * of records instead of a write per MiB), and a SIGKILL loses nothing instead of up to
 * 100 ms of records (benchmarks/capture_overhead.py; the figures are in the commit). */
#define FORMAT_VERSION 3
#define HEADER_SIZE 32
#define WINDOW (64ul << 20) /* the largest window */
#define SCRATCH_CAP (1u << 20) /* the longest record (rawfile.MAX_RECORD) */
/* the capture's descriptor sits at or above this number, out of the way of a program
 * that expects the lowest free numbers (dup2 onto 0..9, or the first open after a close) */
#define FD_FLOOR 900

VZ_LOCAL int g_fd = -1;
VZ_LOCAL dev_t g_dev;
VZ_LOCAL ino_t g_ino;
VZ_LOCAL char g_dir[PATH_MAX]; /* VIZALLOC_CAPTURE_DIR, read at start-up */
VZ_LOCAL char g_path[PATH_MAX];
VZ_LOCAL int g_disabled;
VZ_LOCAL pid_t g_pid;
VZ_LOCAL int g_image;            /* this image's number among its pid's images (after exec: 1, 2, ...) */
VZ_LOCAL uint64_t *g_head;       /* the header, mapped for as long as the file is open */
VZ_LOCAL char *g_win;            /* the window records are copied into */
VZ_LOCAL uint64_t g_win_off, g_win_len, g_file_len;
VZ_LOCAL uint64_t g_end;         /* the file offset after the last complete record */
VZ_LOCAL uint64_t g_seq;         /* records in the file so far (each record's check counts it) */
VZ_LOCAL int g_reopened;         /* the program closed (or reused) the capture's descriptor: say so */
VZ_LOCAL int g_opened;           /* this image's file was created */
VZ_LOCAL uint64_t g_generation = 1; /* which image's descriptions the "already written" marks belong to */
VZ_LOCAL uint64_t g_next_call = 1;
VZ_LOCAL uint64_t g_counts[32];
VZ_LOCAL uint64_t g_last_tid;    /* the thread the last record came from */
VZ_LOCAL __thread uint64_t t_call;  /* innermost open call of this thread */
VZ_LOCAL __thread ptr t_galloc;     /* the graph allocator whose call is running */
VZ_LOCAL __thread int t_inside;     /* >0 while this thread is inside our own code */
VZ_LOCAL __thread uint64_t t_tid;   /* this thread's id (gettid), 0 until asked */

VZ_LOCAL uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

VZ_LOCAL uint64_t thread_id(void) {
    if (t_tid == 0) t_tid = (uint64_t)syscall(SYS_gettid);
    return t_tid;
}

/* `s` + decimal `v`: no snprintf, so the fork child's handler may build a name */
VZ_LOCAL char *put_dec(char *s, char *end, uint64_t v) {
    char tmp[24];
    int n = 0;
    do tmp[n++] = (char)('0' + v % 10); while ((v /= 10) && n < 24);
    while (n && s < end) *s++ = tmp[--n];
    return s;
}

VZ_LOCAL int image_path(char *out, size_t cap, int image) {
    char *p = out, *end = out + cap - 1;
    size_t n = strnlen(g_dir, sizeof g_dir);
    static const char stem[] = "/capture.", ext[] = ".vzcap";
    if (n + sizeof stem + sizeof ext + 48 > cap) return 0;
    memcpy(p, g_dir, n);
    p += n;
    memcpy(p, stem, sizeof stem - 1);
    p += sizeof stem - 1;
    p = put_dec(p, end, (uint64_t)g_pid);
    *p++ = '.';
    p = put_dec(p, end, (uint64_t)image);
    memcpy(p, ext, sizeof ext); /* with its NUL */
    return 1;
}

VZ_LOCAL int high_fd(int fd) {
    int floor = FD_FLOOR;
    struct rlimit rl; /* under a low limit on descriptors, as high as it allows */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < FD_FLOOR + 64)
        floor = rl.rlim_cur > 64 ? (int)rl.rlim_cur - 32 : fd;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (hi < 0) return fd; /* a low limit on descriptors: keep the one we have */
    close(fd);
    return hi;
}

VZ_LOCAL int same_file(int fd) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == g_dev && st.st_ino == g_ino;
}

/* Before the descriptor is used: it must still be the capture's own file. A program that
 * closed it (closing every descriptor it did not open) or got its number back for a file
 * of its own does not see it written to: the capture opens its file again by path (never
 * creating one: a file that is not the one it made is left alone and recording stops). */
VZ_LOCAL int own_fd(void) {
    if (same_file(g_fd)) return 1;
    g_fd = -1; /* not ours any more: never closed, the program may be using the number */
    int fd = open(g_path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    if (!same_file(fd)) {
        close(fd);
        return 0;
    }
    g_fd = high_fd(fd);
    g_reopened++;
    return 1;
}

VZ_LOCAL void stop_recording(void) { g_disabled = 1; }

VZ_LOCAL int map_window(uint64_t need) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t off = g_end & ~(uint64_t)(page - 1);
    /* windows double from 1 MiB to WINDOW: a small capture stays a small file, and a big
     * one is remapped rarely */
    uint64_t len = g_win_len ? 2 * g_win_len : (1ul << 20);
    if (len > WINDOW) len = WINDOW;
    while (off + len < g_end + need) len += WINDOW;
    if (!own_fd()) return 0;
    if (off + len > g_file_len) {
        /* the blocks are reserved now: a write into a hole of a full disk would be a SIGBUS
         * in the program, a failed fallocate only stops recording */
        if (fallocate(g_fd, 0, (off_t)g_file_len, (off_t)(off + len - g_file_len)) != 0 &&
            (errno != EOPNOTSUPP || ftruncate(g_fd, (off_t)(off + len)) != 0))
            return 0;
        g_file_len = off + len;
    }
    void *w = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, (off_t)off);
    if (w == MAP_FAILED) return 0;
    if (g_win) munmap(g_win, g_win_len);
    g_win = w;
    g_win_off = off;
    g_win_len = len;
    return 1;
}

/* CRC-CCITT (polynomial 0x1021, no reflection), as Python's binascii.crc_hqx computes it, so
 * the reader checks every record at C speed. Four bytes a step ("slicing by 4": crc_table[k]
 * is a byte followed by k zero bytes): a 4 MiB capture of llama.cpp checks in a quarter of
 * the time of the one-table byte loop (2.7 against 10.3 ms on the development machine),
 * which was 0.7% of the program's CPU. Built when the capture opens its file. */
VZ_LOCAL uint16_t crc_table[4][256];
VZ_LOCAL int crc_ready;

VZ_LOCAL void crc_init(void) {
    for (unsigned b = 0; b < 256; b++) {
        unsigned c = b << 8;
        for (int k = 0; k < 8; k++) c = (c & 0x8000u) ? ((c << 1) ^ 0x1021u) : (c << 1);
        crc_table[0][b] = (uint16_t)c;
    }
    for (int k = 1; k < 4; k++)
        for (unsigned b = 0; b < 256; b++) {
            uint16_t p = crc_table[k - 1][b];
            crc_table[k][b] = (uint16_t)((p << 8) ^ crc_table[0][p >> 8]);
        }
    crc_ready = 1;
}

VZ_LOCAL uint16_t crc16(uint16_t crc, const unsigned char *p, size_t n) {
    for (; n >= 4; p += 4, n -= 4)
        crc = (uint16_t)(crc_table[3][(crc >> 8) ^ p[0]] ^ crc_table[2][(crc & 0xFFu) ^ p[1]] ^
                         crc_table[1][p[2]] ^ crc_table[0][p[3]]);
    for (; n; p++, n--) crc = (uint16_t)((crc << 8) ^ crc_table[0][((crc >> 8) ^ *p) & 0xFFu]);
    return crc;
}

VZ_LOCAL void open_output(void) {
    if (g_fd >= 0 || g_disabled) return;
    if (g_dir[0] == '\0' || g_opened) { /* once per image: a lost file is not replaced by a new one */
        stop_recording();
        return;
    }
    /* one file per image: an exec'd program (same pid) takes the next free number */
    g_opened = 1;
    int fd = -1;
    for (int image = 0; image < 100000 && fd < 0; image++) {
        if (!image_path(g_path, sizeof g_path, image)) break;
        fd = open(g_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
        g_image = image;
    }
    if (fd < 0) {
        stop_recording();
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        stop_recording();
        return;
    }
    g_dev = st.st_dev;
    g_ino = st.st_ino;
    g_fd = high_fd(fd);
    g_file_len = 0;
    g_end = 0;
    if (!map_window(HEADER_SIZE)) {
        stop_recording();
        return;
    }
    void *h = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, g_fd, 0);
    if (h == MAP_FAILED) {
        stop_recording();
        return;
    }
    g_head = h;
    static const char magic[16] = "VZCAPTURE\0\0\0\3\0\0\0"; /* name, FORMAT_VERSION */
    memcpy(g_head, magic, sizeof magic);
    g_end = HEADER_SIZE;
    g_seq = 0;
    if (!crc_ready) crc_init();
    __atomic_store_n(&g_head[2], g_end, __ATOMIC_RELEASE);
}

/* A record's check, in its frame's two spare bytes: over its sequence number in the file
 * (u64, 0 for the first record after the header: a dropped, repeated or swapped record
 * fails too), the frame's kind and length bytes and the payload; started at 0xFFFF so that
 * zero fill never checks (rawfile.frame computes the same). */
VZ_LOCAL void rec_check(char *p, size_t n, uint64_t seq) {
    unsigned char head[14];
    memcpy(head, &seq, 8); /* little-endian: the capture runs on x86-64 and arm64 Linux */
    memcpy(head + 8, p, 2);
    memcpy(head + 10, p + 4, 4);
    uint16_t crc = crc16(0xFFFFu, head, sizeof head);
    crc = crc16(crc, (const unsigned char *)p + 8, n - 8);
    memcpy(p + 2, &crc, 2);
}

/* One record's bytes into the file: checked, copied, then counted in the header's end. */
VZ_LOCAL void emit(char *p, size_t n) {
    if (g_disabled) return;
    if (g_fd < 0) open_output();
    if (g_disabled) return;
    if (g_end + n > g_win_off + g_win_len && !map_window(n)) {
        stop_recording();
        return;
    }
    rec_check(p, n, g_seq);
    memcpy(g_win + (g_end - g_win_off), p, n);
    g_seq++;
    g_end += n;
    __atomic_store_n(&g_head[2], g_end, __ATOMIC_RELEASE);
}

/* A record: u16 kind, u16 check (rec_check), u32 payload length, payload. */
typedef struct {
    char *p;
    size_t len;
    size_t cap;
    int ok;
} rec;

VZ_LOCAL char g_scratch[SCRATCH_CAP];

VZ_LOCAL void rec_begin_in(rec *r, int kind, char *buf, size_t cap) {
    r->p = buf;
    r->cap = cap;
    r->len = 8;
    r->ok = 1;
    uint16_t k = (uint16_t)kind;
    memcpy(r->p, &k, 2);
    memset(r->p + 2, 0, 6);
}

VZ_LOCAL void rec_begin(rec *r, int kind) { rec_begin_in(r, kind, g_scratch, sizeof g_scratch); }

VZ_LOCAL void rec_put(rec *r, const void *data, size_t n) {
    if (!r->ok || r->len + n > r->cap) {
        r->ok = 0;
        return;
    }
    memcpy(r->p + r->len, data, n);
    r->len += n;
}

VZ_LOCAL void rec_u64(rec *r, uint64_t v) { rec_put(r, &v, 8); }
VZ_LOCAL void rec_i64(rec *r, int64_t v) { rec_put(r, &v, 8); }
VZ_LOCAL void rec_ptr(rec *r, const void *v) { rec_u64(r, (uint64_t)(uintptr_t)v); }
/* names cut since the last record (a note after it says so) */
VZ_LOCAL int g_cut_names;

VZ_LOCAL void rec_str(rec *r, const char *s) {
    uint32_t n = s ? (uint32_t)strnlen(s, 4097) : 0;
    if (n > 4096) {
        n = 4096;
        g_cut_names++;
    }
    rec_put(r, &n, 4);
    if (n) rec_put(r, s, n);
}

VZ_LOCAL void rec_seal(rec *r) {
    uint32_t payload = (uint32_t)(r->len - 8);
    memcpy(r->p + 4, &payload, 4);
}

VZ_LOCAL void start_image(void);
VZ_LOCAL void note_text(const char *text);
VZ_LOCAL int g_said_hello;

/* Large records (graphs of 100k nodes) may exceed the scratch space: they are written in
 * parts by the caller (see put_call), so a record never needs more than SCRATCH_CAP. */
VZ_LOCAL void rec_end(rec *r) {
    if (g_disabled) return;
    if (!r->ok) {
        uint16_t kind;
        memcpy(&kind, r->p, 2);
        char text[160];
        snprintf(text, sizeof text, "a record of kind %d was larger than the capture's %u-byte record limit and "
                 "was not written", kind, SCRATCH_CAP);
        note_text(text);
        return;
    }
    if (!g_said_hello) {
        /* the image's first records, whatever is written first; they are built in the
         * scratch space too, so a record waiting there is kept aside meanwhile */
        g_said_hello = 1;
        char *kept = r->p == g_scratch ? malloc(r->len) : NULL;
        if (r->p == g_scratch && kept == NULL) {
            stop_recording();
            return;
        }
        if (kept) memcpy(kept, r->p, r->len);
        start_image();
        if (kept) {
            memcpy(g_scratch, kept, r->len);
            free(kept);
        }
    }
    uint64_t tid = thread_id();
    if (tid != g_last_tid) {
        /* the records after this one come from thread `tid` (until the next such record) */
        char buf[16];
        rec t;
        rec_begin_in(&t, R_THREAD, buf, sizeof buf);
        rec_u64(&t, tid);
        rec_seal(&t);
        emit(t.p, t.len);
        g_last_tid = tid;
    }
    rec_seal(r);
    emit(r->p, r->len);
    if (g_cut_names) {
        g_cut_names = 0;
        note_text("a name (of a library, buffer type, backend or call site) was longer than the capture keeps "
                  "and was cut");
    }
    if (g_reopened) {
        g_reopened = 0;
        note_text("the program closed the capture's file descriptor (or gave its number to a file of its own); "
                  "the capture opened its file again and wrote nothing into the program's files. No record was "
                  "lost: records are copied into a memory map of the capture file, which outlives the descriptor");
    }
}

VZ_LOCAL void note_text(const char *text) {
    char buf[4200];
    rec r;
    rec_begin_in(&r, R_NOTE, buf, sizeof buf);
    rec_str(&r, text);
    rec_end(&r);
}

VZ_LOCAL void note(const char *fmt, const char *a, const char *b) {
    char text[4096];
    snprintf(text, sizeof text, fmt, a ? a : "", b ? b : "");
    note_text(text);
}

/* Recording from a hook: under the lock, and with this thread marked as inside the
 * capture so the ggml functions the capture itself calls are not recorded. The body must
 * not return or break out. */
#define RECORDING for (int once_ = (pthread_mutex_lock(&g_lock), t_inside++, 1); once_; \
                       once_ = (t_inside--, pthread_mutex_unlock(&g_lock), 0))
/* a real ggml function that calls other hooked ones, recorded as one call */
#define UNRECORDED for (int once_ = (t_inside++, 1); once_; once_ = (t_inside--, 0))


/* ------------------------------------------------------------------------------------ */
/* finding the real functions                                                           */

VZ_LOCAL void *self_base(void) {
    static void *base;
    Dl_info info;
    if (base == NULL && dladdr((void *)&self_base, &info)) base = info.dli_fbase;
    return base;
}

typedef struct {
    const char *symbol;
    void *self_base;
    void *found_handle;
    char found_path[PATH_MAX];
} find_ctx;

VZ_LOCAL int find_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    find_ctx *fc = data;
    const char *name = info->dlpi_name;
    if (name == NULL || name[0] == '\0' || (void *)info->dlpi_addr == fc->self_base) return 0;
    void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    void *sym = dlsym(h, fc->symbol);
    Dl_info di;
    /* the definition must live in this very object, not in one of its dependencies */
    if (sym != NULL && dladdr(sym, &di) && (uintptr_t)di.dli_fbase == (uintptr_t)info->dlpi_addr) {
        fc->found_handle = h;
        snprintf(fc->found_path, sizeof fc->found_path, "%s", name);
        return 1;
    }
    dlclose(h);
    return 0;
}

#define LOAD(lib, field, name) (lib)->field = (__typeof__((lib)->field))dlsym((lib)->handle, name)

VZ_LOCAL void load_lib_symbols(ggml_lib *L) {
    LOAD(L, gallocr_new, "ggml_gallocr_new");
    LOAD(L, gallocr_new_n, "ggml_gallocr_new_n");
    LOAD(L, gallocr_free, "ggml_gallocr_free");
    LOAD(L, gallocr_reserve, "ggml_gallocr_reserve");
    LOAD(L, gallocr_reserve_n, "ggml_gallocr_reserve_n");
    LOAD(L, gallocr_reserve_n_size, "ggml_gallocr_reserve_n_size");
    LOAD(L, gallocr_alloc_graph, "ggml_gallocr_alloc_graph");
    LOAD(L, sched_new, "ggml_backend_sched_new");
    LOAD(L, sched_free, "ggml_backend_sched_free");
    LOAD(L, sched_reserve, "ggml_backend_sched_reserve");
    LOAD(L, sched_reserve_size, "ggml_backend_sched_reserve_size");
    LOAD(L, sched_alloc_graph, "ggml_backend_sched_alloc_graph");
    LOAD(L, sched_reset, "ggml_backend_sched_reset");
    LOAD(L, sched_graph_compute, "ggml_backend_sched_graph_compute");
    LOAD(L, sched_graph_compute_async, "ggml_backend_sched_graph_compute_async");
    LOAD(L, backend_graph_compute, "ggml_backend_graph_compute");
    LOAD(L, backend_graph_compute_async, "ggml_backend_graph_compute_async");
    LOAD(L, buft_alloc_buffer, "ggml_backend_buft_alloc_buffer");
    LOAD(L, buffer_free, "ggml_backend_buffer_free");
    LOAD(L, buffer_clear, "ggml_backend_buffer_clear");
    LOAD(L, buffer_set_usage, "ggml_backend_buffer_set_usage");
    LOAD(L, buffer_reset, "ggml_backend_buffer_reset");
    LOAD(L, tensor_alloc, "ggml_backend_tensor_alloc");
    LOAD(L, view_init, "ggml_backend_view_init");
    LOAD(L, tensor_set, "ggml_backend_tensor_set");
    LOAD(L, tensor_get, "ggml_backend_tensor_get");
    LOAD(L, tensor_set_async, "ggml_backend_tensor_set_async");
    LOAD(L, tensor_get_async, "ggml_backend_tensor_get_async");
    LOAD(L, tensor_memset, "ggml_backend_tensor_memset");
    LOAD(L, tensor_copy, "ggml_backend_tensor_copy");
    LOAD(L, version, "ggml_version");
    LOAD(L, commit, "ggml_commit");
    LOAD(L, tensor_overhead, "ggml_tensor_overhead");
    LOAD(L, nbytes, "ggml_nbytes");
    LOAD(L, get_name, "ggml_get_name");
    LOAD(L, blck_size, "ggml_blck_size");
    LOAD(L, type_size, "ggml_type_size");
    LOAD(L, type_name, "ggml_type_name");
    LOAD(L, op_name, "ggml_op_name");
    LOAD(L, unary_op_name, "ggml_unary_op_name");
    LOAD(L, glu_op_name, "ggml_glu_op_name");
    LOAD(L, graph_n_nodes, "ggml_graph_n_nodes");
    LOAD(L, graph_nodes, "ggml_graph_nodes");
    LOAD(L, graph_size, "ggml_graph_size");
    LOAD(L, buffer_get_base, "ggml_backend_buffer_get_base");
    LOAD(L, buffer_get_size, "ggml_backend_buffer_get_size");
    LOAD(L, buffer_get_type, "ggml_backend_buffer_get_type");
    LOAD(L, buffer_get_usage, "ggml_backend_buffer_get_usage");
    LOAD(L, buffer_is_multi, "ggml_backend_buffer_is_multi_buffer");
    LOAD(L, buft_name, "ggml_backend_buft_name");
    LOAD(L, buft_get_alignment, "ggml_backend_buft_get_alignment");
    LOAD(L, buft_get_max_size, "ggml_backend_buft_get_max_size");
    LOAD(L, buft_get_alloc_size, "ggml_backend_buft_get_alloc_size");
    LOAD(L, buft_is_host, "ggml_backend_buft_is_host");
    LOAD(L, backend_name, "ggml_backend_name");
    LOAD(L, backend_get_default_buffer_type, "ggml_backend_get_default_buffer_type");
    LOAD(L, sched_get_n_splits, "ggml_backend_sched_get_n_splits");
    LOAD(L, sched_get_n_backends, "ggml_backend_sched_get_n_backends");
    LOAD(L, sched_get_backend, "ggml_backend_sched_get_backend");
    LOAD(L, sched_get_tensor_backend, "ggml_backend_sched_get_tensor_backend");
    LOAD(L, sched_get_buffer_type, "ggml_backend_sched_get_buffer_type");
}

typedef struct {
    uintptr_t base, lo, hi;
} extent_ctx;

VZ_LOCAL int extent_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    extent_ctx *e = data;
    if ((uintptr_t)info->dlpi_addr != e->base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        if (e->lo == 0 || a < e->lo) e->lo = a;
        if (b > e->hi) e->hi = b;
    }
    return 1;
}

VZ_LOCAL void check_layout(ggml_lib *L);

VZ_LOCAL ggml_lib *add_lib(void *handle, const char *path) {
    for (int i = 0; i < g_n_libs; i++) {
        if (strcmp(g_libs[i]->path, path) == 0) {
            dlclose(handle);
            return g_libs[i];
        }
    }
    if (g_n_libs == g_libs_cap) {
        int cap = g_libs_cap ? 2 * g_libs_cap : 8;
        ggml_lib **n = realloc(g_libs, (size_t)cap * sizeof *n);
        if (n == NULL) {
            dlclose(handle);
            return NULL;
        }
        g_libs = n;
        g_libs_cap = cap;
    }
    ggml_lib *L = calloc(1, sizeof *L);
    if (L == NULL) {
        dlclose(handle);
        return NULL;
    }
    g_libs[g_n_libs] = L;
    L->id = g_n_libs;
    L->handle = handle;
    snprintf(L->path, sizeof L->path, "%s", path);
    load_lib_symbols(L);
    if (L->tensor_alloc) {
        Dl_info di;
        if (dladdr((void *)L->tensor_alloc, &di)) L->base = di.dli_fbase;
        /* dladdr scans an object's whole symbol table: in a big library (llama.cpp in one
         * object) that is a fraction of a millisecond a call, so calls from inside a known
         * ggml are recognised by address instead */
        extent_ctx e = {(uintptr_t)L->base, 0, 0};
        dl_iterate_phdr(extent_cb, &e);
        L->lo = e.lo;
        L->hi = e.hi;
    }
    g_n_libs++;
    check_layout(L);
    return L;
}

/* The object that defines `sym`, as a library entry. */
VZ_LOCAL ggml_lib *lib_of_symbol(void *sym) {
    Dl_info di;
    if (sym == NULL || !dladdr(sym, &di) || di.dli_fbase == self_base() || di.dli_fname == NULL) return NULL;
    for (int i = 0; i < g_n_libs; i++)
        if (g_libs[i]->base == di.dli_fbase) return g_libs[i];
    void *h = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return NULL;
    return add_lib(h, di.dli_fname);
}

/* Every ggml in the process that defines `symbol`: the one after us in the global scope
 * (a program linked against libggml), then any loaded with RTLD_LOCAL (Python extensions). */
VZ_LOCAL void discover(const char *symbol) {
    lib_of_symbol(dlsym(RTLD_NEXT, symbol));
    find_ctx fc = {symbol, self_base(), NULL, {0}};
    dl_iterate_phdr(find_cb, &fc);
    if (fc.found_handle) {
        void *sym = dlsym(fc.found_handle, symbol);
        dlclose(fc.found_handle);
        lib_of_symbol(sym);
    }
}

/* which ggml a call site belongs to, by return address (call sites are few), and the
 * site's "object\tfunction" once a call record has needed it */
#define SITE_CACHE 512
#define SITE_NAME 512
VZ_LOCAL struct {
    void *site;
    ggml_lib *lib;
    int named;
    char name[SITE_NAME];
} g_sites[SITE_CACHE];

/* The ggml whose `symbol` a call from `caller` meant: the caller's own library when it is a
 * ggml (calls inside ggml), else the ggml the caller links to, else the first one found
 * (calls from Python's ctypes, which links to none). */
VZ_LOCAL ggml_lib *lib_for(const char *symbol, void *caller) {
    size_t slot = ((uintptr_t)caller >> 2) % SITE_CACHE;
    if (caller && g_sites[slot].site == caller) return g_sites[slot].lib;
    if (g_n_libs == 0) discover(symbol);
    ggml_lib *found = NULL;
    for (int i = 0; i < g_n_libs && caller && !found; i++)
        if (g_libs[i]->lo <= (uintptr_t)caller && (uintptr_t)caller < g_libs[i]->hi) found = g_libs[i];
    Dl_info ci;
    if (!found && caller && dladdr(caller, &ci)) {
        for (int i = 0; i < g_n_libs && !found; i++)
            if (g_libs[i]->base == ci.dli_fbase) found = g_libs[i];
        if (!found && ci.dli_fname && ci.dli_fbase != self_base()) {
            void *h = dlopen(ci.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
            if (h) {
                found = lib_of_symbol(dlsym(h, symbol));
                dlclose(h);
            }
        }
    }
    if (!found && g_n_libs == 0) discover(symbol);
    if (!found && g_n_libs > 0) found = g_libs[0];
    if (found && caller) {
        g_sites[slot].site = caller;
        g_sites[slot].lib = found;
        g_sites[slot].named = 0;
    }
    return found;
}

/* ------------------------------------------------------------------------------------ */
/* layout check and the records that describe things                                    */

VZ_LOCAL void put_library(ggml_lib *L, const char *reason) {
    if (reason != L->reason) snprintf(L->reason, sizeof L->reason, "%s", reason);
    char buf[5 * 4096 + 64]; /* not the scratch space: a fork child describes its libraries from inside rec_end */
    rec r;
    rec_begin_in(&r, R_LIBRARY, buf, sizeof buf);
    rec_i64(&r, L->id);
    rec_i64(&r, L->status);
    rec_u64(&r, L->tensor_overhead ? L->tensor_overhead() - GGML_OBJECT_SIZE : 0);
    rec_i64(&r, L->graph_ok);
    rec_str(&r, L->version ? L->version() : "unknown");
    rec_str(&r, L->commit ? L->commit() : "unknown");
    rec_str(&r, L->path);
    rec_str(&r, reason);
    rec_end(&r);
}

/* The size of struct ggml_tensor in each library (0: the known 336 bytes). ggml built with
 * another GGML_MAX_NAME has the same fields at the same offsets up to the name, then the
 * name, then extra and 8 bytes of padding: its size says how long the name is. */
#define NAME_TAIL 16 /* extra and padding after the name */

VZ_LOCAL int name_fits(size_t size) {
    return size > OFF_NAME + NAME_TAIL && (size - OFF_NAME - NAME_TAIL) % 8 == 0 &&
           size - OFF_NAME - NAME_TAIL <= 4096;
}

VZ_LOCAL size_t tensor_size(const ggml_lib *L) { return L->tensor_struct_size ? L->tensor_struct_size : TENSOR_SIZE_KNOWN; }

/* What the capture compares to see whether a tensor changed (TENSOR_SIZE_KNOWN bytes): the
 * fields before the name, the name's first 64 bytes, extra and padding. */
VZ_LOCAL void tensor_snap(const ggml_lib *L, const void *t, unsigned char *out) {
    size_t size = tensor_size(L);
    if (size == TENSOR_SIZE_KNOWN) {
        memcpy(out, t, TENSOR_SIZE_KNOWN);
        return;
    }
    size_t head = OFF_NAME + (size - OFF_NAME - NAME_TAIL < 64 ? size - OFF_NAME - NAME_TAIL : 64);
    memset(out, 0, TENSOR_SIZE_KNOWN);
    memcpy(out, t, head);
    memcpy(out + TENSOR_SIZE_KNOWN - NAME_TAIL, (const char *)t + size - NAME_TAIL, NAME_TAIL);
}

VZ_LOCAL void check_layout(ggml_lib *L) {
    const char *missing = NULL;
    if (!L->tensor_alloc) missing = "ggml_backend_tensor_alloc";
    else if (!L->tensor_overhead) missing = "ggml_tensor_overhead";
    else if (!L->nbytes) missing = "ggml_nbytes";
    else if (!L->get_name) missing = "ggml_get_name";
    else if (!L->type_name || !L->blck_size || !L->type_size) missing = "ggml_type_name";
    else if (!L->op_name) missing = "ggml_op_name";
    else if (!L->graph_n_nodes || !L->graph_nodes || !L->graph_size) missing = "ggml_graph_n_nodes";
    else if (!L->buffer_get_base || !L->buffer_get_size || !L->buffer_get_type) missing = "ggml_backend_buffer_get_base";
    else if (!L->buft_name || !L->buft_get_alignment || !L->buft_get_max_size) missing = "ggml_backend_buft_name";
    if (missing) {
        L->status = -1;
        char why[256];
        snprintf(why, sizeof why, "the library does not export %s", missing);
        put_library(L, why);
        return;
    }
    size_t size = L->tensor_overhead() - GGML_OBJECT_SIZE;
    if (size != TENSOR_SIZE_KNOWN && name_fits(size)) {
        /* ggml built with another GGML_MAX_NAME: the same fields, a longer or shorter name
         * (the first tensor confirms where the name is) */
        L->tensor_struct_size = size;
    } else if (size != TENSOR_SIZE_KNOWN) {
        L->status = -1;
        char why[256];
        snprintf(why, sizeof why, "struct ggml_tensor is %zu bytes; vizalloc knows the %d-byte layout", size,
                 TENSOR_SIZE_KNOWN);
        put_library(L, why);
        return;
    }
    L->status = 0; /* size fits; the fields are checked on the first tensor seen */
    L->graph_ok = 0;
}

/* Checked on the first real tensor: the name and the byte span computed from the fields at
 * our offsets must agree with ggml's own accessors. */
VZ_LOCAL int tensor_layout_ok(ggml_lib *L, const void *t) {
    if (L->status != 0) return L->status == 1;
    const char *why = NULL;
    if (L->get_name(t) != (const char *)t + OFF_NAME) why = "ggml_get_name points elsewhere";
    int type = RD(int, t, OFF_TYPE);
    if (!why && (type < 0 || type > 255)) why = "the type field is out of range";
    if (!why) {
        int64_t blck = L->blck_size(type);
        size_t tsize = L->type_size(type);
        const int64_t *ne = (const int64_t *)((const char *)t + OFF_NE);
        const size_t *nb = (const size_t *)((const char *)t + OFF_NB);
        size_t expect = 0;
        int empty = 0;
        for (int i = 0; i < 4; i++)
            if (ne[i] <= 0) empty = 1;
        if (!empty && blck > 0) {
            if (blck == 1) {
                expect = tsize;
                for (int i = 0; i < 4; i++) expect += (size_t)(ne[i] - 1) * nb[i];
            } else {
                expect = (size_t)ne[0] * nb[0] / (size_t)blck;
                for (int i = 1; i < 4; i++) expect += (size_t)(ne[i] - 1) * nb[i];
            }
        }
        if (L->nbytes(t) != expect) why = "ggml_nbytes disagrees with ne/nb read at the known offsets";
    }
    if (why) {
        L->status = -1;
        char text[256];
        if (tensor_size(L) != TENSOR_SIZE_KNOWN) { /* the size was taken for another GGML_MAX_NAME */
            snprintf(text, sizeof text, "struct ggml_tensor is %zu bytes, and not the %d-byte layout with another "
                     "GGML_MAX_NAME: %s", tensor_size(L), TENSOR_SIZE_KNOWN, why);
            why = text;
        }
        put_library(L, why);
        return 0;
    }
    L->status = 1;
    put_library(L, "");
    return 1;
}

VZ_LOCAL int graph_layout_ok(ggml_lib *L, void *g) {
    if (L->graph_ok != 0) return L->graph_ok == 1;
    int ok = RD(int, g, G_OFF_SIZE) == L->graph_size(g) && RD(int, g, G_OFF_N_NODES) == L->graph_n_nodes(g) &&
             RD(void *, g, G_OFF_NODES) == (void *)L->graph_nodes(g);
    int n_leafs = RD(int, g, G_OFF_N_LEAFS);
    if (ok && (n_leafs < 0 || n_leafs > RD(int, g, G_OFF_SIZE))) ok = 0;
    L->graph_ok = ok ? 1 : -1;
    if (!ok) note("struct ggml_cgraph does not have the known layout (size, n_nodes, n_leafs, nodes, ..., leafs)%s%s",
                  "", "");
    return ok;
}

VZ_LOCAL void put_type(ggml_lib *L, int type) {
    if (type < 0 || type > 255) {
        if (L->noted_range++) return;
        char what[32];
        snprintf(what, sizeof what, "%d", type);
        note("a tensor has type id %s, outside 0..255: its type was not described%s", what, "");
        return;
    }
    if (L->type_seen[type]) return;
    L->type_seen[type] = 1;
    rec r;
    rec_begin(&r, R_TYPE);
    rec_i64(&r, L->id);
    rec_i64(&r, type);
    rec_i64(&r, L->blck_size(type));
    rec_u64(&r, L->type_size(type));
    rec_str(&r, L->type_name(type));
    rec_end(&r);
}

VZ_LOCAL void put_op(ggml_lib *L, int family, int id) {
    if (id < 0 || id > 255) {
        if (L->noted_range++) return;
        char what[32];
        snprintf(what, sizeof what, "%d", id);
        note("a tensor has op id %s (family %s), outside 0..255: its op was not described", what,
             family == 0 ? "op" : family == 1 ? "unary" : "glu");
        return;
    }
    if (L->op_seen[family][id]) return;
    const char *name = NULL;
    if (family == 0) name = L->op_name(id);
    else if (family == 1 && L->unary_op_name) name = L->unary_op_name(id);
    else if (family == 2 && L->glu_op_name) name = L->glu_op_name(id);
    if (name == NULL) return;
    L->op_seen[family][id] = 1;
    rec r;
    rec_begin(&r, R_OP);
    rec_i64(&r, L->id);
    rec_i64(&r, family);
    rec_i64(&r, id);
    rec_str(&r, name);
    rec_end(&r);
}

/* Pointer maps (open addressing, linear probing, grown at half load): the buffer types,
 * buffers and backends already described, and the buffers ggml freed with the bytes they
 * held. They grow with the process; a failed allocation stops recording, never the program. */
#define PMAP_EMPTY 0
#define PMAP_GONE 1
typedef struct {
    uintptr_t key;
    uintptr_t base, size;
    uint64_t gen;     /* the image (g_generation) it was last described in */
    uintptr_t owner;  /* a buffer's graph allocator, when one made it */
} pentry;
typedef struct {
    pentry *e;
    size_t cap, used; /* used counts tombstones too */
} pmap;
VZ_LOCAL pmap g_bufts, g_buffers, g_backends;

VZ_LOCAL pentry *pmap_find(pmap *m, const void *p) {
    if (m->cap == 0) return NULL;
    uintptr_t k = (uintptr_t)p;
    for (size_t i = (k >> 4) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->e[i].key == k) return &m->e[i];
        if (m->e[i].key == PMAP_EMPTY) return NULL;
    }
}

VZ_LOCAL int pmap_has(pmap *m, const void *p) { return pmap_find(m, p) != NULL; }

VZ_LOCAL pentry *pmap_add(pmap *m, const void *p) {
    pentry *found = pmap_find(m, p);
    if (found) return found;
    if ((m->used + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        pentry *n = calloc(ncap, sizeof *n);
        if (n == NULL) {
            g_disabled = 1;
            return NULL;
        }
        size_t used = 0;
        for (size_t i = 0; i < m->cap; i++) {
            uintptr_t k = m->e[i].key;
            if (k == PMAP_EMPTY || k == PMAP_GONE) continue;
            size_t j = (k >> 4) & (ncap - 1);
            while (n[j].key) j = (j + 1) & (ncap - 1);
            n[j] = m->e[i];
            used++;
        }
        free(m->e);
        m->e = n;
        m->cap = ncap;
        m->used = used;
    }
    uintptr_t k = (uintptr_t)p;
    size_t i = (k >> 4) & (m->cap - 1);
    while (m->e[i].key != PMAP_EMPTY && m->e[i].key != PMAP_GONE) i = (i + 1) & (m->cap - 1);
    if (m->e[i].key == PMAP_EMPTY) m->used++;
    m->e[i].key = k;
    m->e[i].base = m->e[i].size = m->e[i].owner = 0;
    m->e[i].gen = 0;
    return &m->e[i];
}

/* Whether `p` was described in this image's file (a fork child describes everything again);
 * `mark` says it now is, and gives its entry. */
VZ_LOCAL int described(pmap *m, const void *p) {
    pentry *e = pmap_find(m, p);
    return e != NULL && e->gen == g_generation;
}

VZ_LOCAL pentry *mark(pmap *m, const void *p) {
    pentry *e = pmap_add(m, p);
    if (e) e->gen = g_generation;
    return e;
}

VZ_LOCAL void pmap_del(pmap *m, const void *p) {
    pentry *e = pmap_find(m, p);
    if (e) e->key = PMAP_GONE;
}

/* Buffers ggml freed, with the bytes they held. A tensor the program keeps may still name
 * one (a stale pointer); the object at that address is gone, and ggml's accessors would
 * call through freed memory. A buffer made later at the same address leaves the map. */
VZ_LOCAL pmap g_freed;

VZ_LOCAL void freed_add(const void *buffer, uintptr_t base, size_t size) {
    pentry *e = pmap_add(&g_freed, buffer);
    if (e) {
        e->base = base;
        e->size = size;
    }
}

VZ_LOCAL void put_buft(ggml_lib *L, void *buft) {
    if (buft == NULL || described(&g_bufts, buft)) return;
    mark(&g_bufts, buft);
    rec r;
    rec_begin(&r, R_BUFT);
    rec_i64(&r, L->id);
    rec_ptr(&r, buft);
    rec_u64(&r, L->buft_get_alignment(buft));
    rec_u64(&r, L->buft_get_max_size(buft));
    rec_i64(&r, L->buft_is_host ? L->buft_is_host(buft) : 1);
    rec_str(&r, L->buft_name(buft));
    rec_end(&r);
}

enum { HOW_ALLOC = 1, HOW_SEEN = 2 };

VZ_LOCAL void put_buffer(ggml_lib *L, void *buffer, int how) {
    if (buffer == NULL) return;
    if (how == HOW_SEEN && described(&g_buffers, buffer)) return;
    pentry *e = mark(&g_buffers, buffer);
    /* the owner is kept: a fork child describing the buffer again names the same one */
    if (e && e->owner == 0) e->owner = (uintptr_t)t_galloc;
    void *owner = e ? (void *)e->owner : t_galloc;
    void *buft = L->buffer_get_type(buffer);
    put_buft(L, buft);
    rec r;
    rec_begin(&r, R_BUFFER);
    rec_i64(&r, L->id);
    rec_ptr(&r, buffer);
    rec_ptr(&r, buft);
    /* a multi-buffer (weights split over several buffers) has no base of its own: ggml's
     * get_base would call a missing function */
    int multi = L->buffer_is_multi ? L->buffer_is_multi(buffer) : 0;
    rec_ptr(&r, (L->buffer_get_size(buffer) && !multi) ? L->buffer_get_base(buffer) : NULL);
    rec_u64(&r, L->buffer_get_size(buffer));
    rec_i64(&r, L->buffer_get_usage ? L->buffer_get_usage(buffer) : -1);
    rec_i64(&r, how | (multi ? 4 : 0));
    rec_ptr(&r, owner);
    rec_u64(&r, t_call);
    rec_end(&r);
}

/* Last written bytes of each tensor address, so a tensor is written again only when it
 * changed. Open addressing with linear probing; grows by doubling. */
typedef struct {
    uintptr_t addr;
    uint64_t pass; /* the graph pass that last looked at it */
    uint64_t walk; /* the walk of put_tensor_deep that last reached it */
    int deep;      /* its ancestors were described when its bytes were last written */
    unsigned char bytes[TENSOR_SIZE_KNOWN];
} tslot;
VZ_LOCAL tslot *g_tensors;
VZ_LOCAL size_t g_tcap, g_tcount;

VZ_LOCAL tslot *tensor_slot(uintptr_t addr) {
    if (g_tcount * 2 >= g_tcap) {
        size_t ncap = g_tcap ? g_tcap * 2 : 8192;
        tslot *n = calloc(ncap, sizeof *n);
        if (n == NULL) return NULL;
        for (size_t i = 0; i < g_tcap; i++) {
            if (g_tensors[i].addr == 0) continue;
            size_t j = (g_tensors[i].addr >> 4) & (ncap - 1);
            while (n[j].addr) j = (j + 1) & (ncap - 1);
            n[j] = g_tensors[i];
        }
        free(g_tensors);
        g_tensors = n;
        g_tcap = ncap;
    }
    size_t j = (addr >> 4) & (g_tcap - 1);
    while (g_tensors[j].addr && g_tensors[j].addr != addr) j = (j + 1) & (g_tcap - 1);
    if (g_tensors[j].addr == 0) {
        g_tensors[j].addr = addr;
        g_tensors[j].pass = 0;
        g_tensors[j].walk = 0;
        g_tensors[j].deep = 0;
        memset(g_tensors[j].bytes, 0xff, TENSOR_SIZE_KNOWN); /* never equal to a real tensor */
        g_tcount++;
    }
    return &g_tensors[j];
}

VZ_LOCAL void put_tensor(ggml_lib *L, const void *t);

/* A buffer was freed: the tensors last written naming it are written again when next seen.
 * A buffer made later at the same address is another allocation, and a tensor made anew over
 * the same memory (a context re-created where the last one was) can be byte for byte the
 * tensor it replaces; unwritten, it would stay in the freed buffer. */
VZ_LOCAL void forget_tensors_in(const void *buffer) {
    for (size_t i = 0; i < g_tcap; i++) {
        if (g_tensors[i].addr && RD(void *, g_tensors[i].bytes, OFF_BUFFER) == buffer) {
            memset(g_tensors[i].bytes, 0xff, TENSOR_SIZE_KNOWN);
            g_tensors[i].deep = 0;
        }
    }
}

VZ_LOCAL void put_tensor_refs(ggml_lib *L, const void *t) {
    /* what a snapshot refers to must be described before it: buffer, type, op names */
    void *buffer = RD(void *, t, OFF_BUFFER);
    pentry *f = buffer && !pmap_has(&g_buffers, buffer) ? pmap_find(&g_freed, buffer) : NULL;
    uintptr_t data = RD(uintptr_t, t, OFF_DATA);
    uintptr_t end = f ? f->base + (f->size ? f->size : 1) : 0;
    if (f && (data == 0 || (data >= f->base && data < end))) {
        /* a stale pointer into a buffer ggml freed: described before its free, not to be touched */
    } else {
        if (f) pmap_del(&g_freed, buffer); /* a new buffer at a freed one's address */
        put_buffer(L, buffer, HOW_SEEN);
    }
    put_type(L, RD(int, t, OFF_TYPE));
    int op = RD(int, t, OFF_OP);
    put_op(L, 0, op);
    const char *name = L->op_name(op);
    if (name && strcmp(name, OP_UNARY_NAME) == 0) put_op(L, 1, RD(int32_t, t, OFF_OP_PARAMS));
    if (name && strcmp(name, OP_GLU_NAME) == 0) put_op(L, 2, RD(int32_t, t, OFF_OP_PARAMS));
}

/* While a graph's tensors are written (put_graph_tensors), each tensor is compared once:
 * a node's sources are other nodes and leafs of the same graph, met again and again */
VZ_LOCAL uint64_t g_pass, g_passes;

VZ_LOCAL void put_tensor(ggml_lib *L, const void *t) {
    if (t == NULL || L->status < 0) return;
    if (!tensor_layout_ok(L, t)) return;
    tslot *s = tensor_slot((uintptr_t)t);
    if (s && g_pass) {
        if (s->pass == g_pass) return;
        s->pass = g_pass;
    }
    unsigned char snap[TENSOR_SIZE_KNOWN];
    tensor_snap(L, t, snap);
    if (s && memcmp(s->bytes, snap, TENSOR_SIZE_KNOWN) == 0) return;
    put_tensor_refs(L, t);
    if (s) memcpy(s->bytes, snap, TENSOR_SIZE_KNOWN);
    rec r;
    rec_begin(&r, R_TENSOR);
    rec_i64(&r, L->id);
    rec_ptr(&r, t);
    rec_put(&r, t, tensor_size(L));
    rec_end(&r);
}

/* A tensor and every tensor it reaches (sources and view roots, transitively), ancestors
 * first: the reader must know each tensor before one names it, and a tensor may reach
 * tensors no graph of the allocator ever lists (ggml-opt's loss reads the outputs, which read
 * tensors of the program's own graph). A tensor whose bytes did not change since it was
 * written with its ancestors is not walked again, so placing the nodes of a graph one by one
 * costs a few tensors each. ggml_cast makes a tensor its own source: the walk skips what it
 * is already inside. */
typedef struct {
    const void *t;
    int next; /* the next edge to follow: 0 the view root, 1..MAX_SRC the sources */
} walk_item;
VZ_LOCAL walk_item *g_walk;
VZ_LOCAL size_t g_walk_cap;
VZ_LOCAL uint64_t g_walks;

VZ_LOCAL int walk_push(size_t *n, const void *t) {
    if (*n == g_walk_cap) {
        size_t ncap = g_walk_cap ? g_walk_cap * 2 : 256;
        walk_item *w = realloc(g_walk, ncap * sizeof *w);
        if (w == NULL) {
            g_disabled = 1;
            return 0;
        }
        g_walk = w;
        g_walk_cap = ncap;
    }
    g_walk[*n].t = t;
    g_walk[*n].next = 0;
    (*n)++;
    return 1;
}

/* whether the walk goes into t's ancestors (it was not reached yet, and it changed or was
 * never written with them) */
VZ_LOCAL int walk_enter(const ggml_lib *L, const void *t, uint64_t walk) {
    tslot *s = tensor_slot((uintptr_t)t);
    if (s == NULL) return 1;
    if (s->walk == walk || (g_pass && s->pass == g_pass)) return 0;
    s->walk = walk;
    if (!s->deep) return 1;
    unsigned char snap[TENSOR_SIZE_KNOWN];
    tensor_snap(L, t, snap);
    return memcmp(s->bytes, snap, TENSOR_SIZE_KNOWN) != 0;
}

VZ_LOCAL void put_tensor_deep(ggml_lib *L, const void *t) {
    if (t == NULL || L->status < 0 || !tensor_layout_ok(L, t)) return;
    uint64_t walk = ++g_walks;
    size_t n = 0;
    if (!walk_enter(L, t, walk)) {
        put_tensor(L, t);
        return;
    }
    if (!walk_push(&n, t)) return;
    while (n > 0) {
        walk_item *top = &g_walk[n - 1];
        const void *cur = top->t, *next = NULL;
        while (next == NULL && top->next <= MAX_SRC) {
            int k = top->next++;
            const void *c = k == 0 ? RD(void *, cur, OFF_VIEW_SRC) : RD(void *, cur, OFF_SRC + 8 * (k - 1));
            if (c == NULL || c == cur) continue;
            if (walk_enter(L, c, walk)) next = c;
            else put_tensor(L, c); /* written already, or unchanged: put_tensor finds out cheaply */
        }
        if (next != NULL) {
            if (!walk_push(&n, next)) return;
            continue;
        }
        put_tensor(L, cur);
        tslot *s = tensor_slot((uintptr_t)cur);
        if (s) s->deep = 1;
        n--;
    }
}

/* every tensor of a graph (leafs first: they are what the nodes read) */
VZ_LOCAL void put_graph_tensors(ggml_lib *L, void *g) {
    if (g == NULL || L->status < 0 || !graph_layout_ok(L, g)) return;
    int n_leafs = RD(int, g, G_OFF_N_LEAFS), n_nodes = RD(int, g, G_OFF_N_NODES);
    void **leafs = RD(void **, g, G_OFF_LEAFS), **nodes = RD(void **, g, G_OFF_NODES);
    g_pass = ++g_passes;
    for (int i = 0; i < n_leafs; i++) put_tensor_deep(L, leafs[i]);
    for (int i = 0; i < n_nodes; i++) put_tensor_deep(L, nodes[i]);
    g_pass = 0;
}

/* A call record with the graph's node and leaf lists (and buffer ids where given). The
 * lists are written as a sequence of records when they exceed one record's space. */
/* "object\tfunction" of the code that called a hook: where in the program a plan or a
 * compute was asked for (the function name may be C++-mangled) */
VZ_LOCAL const char *site_of(void *caller) {
    static char scratch[512];
    size_t slot = ((uintptr_t)caller >> 2) % SITE_CACHE;
    int cached = caller && g_sites[slot].site == caller; /* enter() put it there: this hook's caller */
    if (cached && g_sites[slot].named) return g_sites[slot].name;
    char *out = cached ? g_sites[slot].name : scratch;
    size_t n = cached ? SITE_NAME : sizeof scratch;
    Dl_info di;
    out[0] = '\0';
    if (caller && dladdr(caller, &di)) { /* a scan of the object's symbols: once per call site */
        const char *obj = di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
        obj = obj ? obj + 1 : (di.dli_fname ? di.dli_fname : "?");
        if (snprintf(out, n, "%s\t%s", obj, di.dli_sname ? di.dli_sname : "") >= (int)n) g_cut_names++;
    }
    if (cached) g_sites[slot].named = 1;
    return out;
}

VZ_LOCAL void put_call(ggml_lib *L, uint64_t id, uint64_t parent, int kind, void *object, void *graph,
                       const int *node_ids, const int *leaf_ids, void *caller) {
    int n_nodes = 0, n_leafs = 0;
    void **nodes = NULL, **leafs = NULL;
    if (graph && L->status >= 0 && graph_layout_ok(L, graph)) {
        n_nodes = RD(int, graph, G_OFF_N_NODES);
        n_leafs = RD(int, graph, G_OFF_N_LEAFS);
        nodes = RD(void **, graph, G_OFF_NODES);
        leafs = RD(void **, graph, G_OFF_LEAFS);
    }
    rec r;
    rec_begin(&r, R_CALL);
    rec_u64(&r, id);
    rec_u64(&r, parent);
    rec_i64(&r, kind);
    rec_i64(&r, L->id);
    rec_ptr(&r, object);
    rec_ptr(&r, graph);
    rec_u64(&r, now_ns());
    rec_i64(&r, n_nodes);
    rec_i64(&r, n_leafs);
    rec_i64(&r, node_ids != NULL);
    rec_i64(&r, leaf_ids != NULL);
    rec_str(&r, site_of(caller));
    /* a graph larger than one record (~60k tensors) is cut into continuation records */
    size_t fixed = r.len;
    size_t per_node = 8 + (node_ids ? 4 : 0), per_leaf = 8 + (leaf_ids ? 4 : 0);
    if (fixed + (size_t)n_nodes * per_node + (size_t)n_leafs * per_leaf <= r.cap) {
        for (int i = 0; i < n_nodes; i++) rec_ptr(&r, nodes[i]);
        for (int i = 0; i < n_leafs; i++) rec_ptr(&r, leafs[i]);
        if (node_ids) rec_put(&r, node_ids, (size_t)n_nodes * 4);
        if (leaf_ids) rec_put(&r, leaf_ids, (size_t)n_leafs * 4);
        rec_end(&r);
        return;
    }
    rec_end(&r);
    /* continuation: R_CALL with kind 0, the same id, then (list, start, count, items) */
    struct {
        void **items;
        const int *ids;
        int n;
        int list;
    } parts[4] = {{nodes, NULL, n_nodes, 0}, {leafs, NULL, n_leafs, 1}, {NULL, node_ids, node_ids ? n_nodes : 0, 2},
                  {NULL, leaf_ids, leaf_ids ? n_leafs : 0, 3}};
    for (int p = 0; p < 4; p++) {
        for (int start = 0; start < parts[p].n; start += 65536) {
            int count = parts[p].n - start < 65536 ? parts[p].n - start : 65536;
            rec c;
            rec_begin(&c, R_CALL);
            rec_u64(&c, id);
            rec_u64(&c, parent);
            rec_i64(&c, 0);
            rec_i64(&c, parts[p].list);
            rec_i64(&c, start);
            rec_i64(&c, count);
            if (parts[p].items)
                for (int i = 0; i < count; i++) rec_ptr(&c, parts[p].items[start + i]);
            else
                rec_put(&c, parts[p].ids + start, (size_t)count * 4);
            rec_end(&c);
        }
    }
}

VZ_LOCAL void put_return(uint64_t id, int kind, int64_t result, const size_t *sizes, int n_sizes) {
    rec r;
    rec_begin(&r, R_RETURN);
    rec_u64(&r, id);
    rec_i64(&r, kind);
    rec_i64(&r, result);
    rec_u64(&r, now_ns());
    rec_i64(&r, n_sizes);
    for (int i = 0; i < n_sizes; i++) rec_u64(&r, sizes[i]);
    rec_end(&r);
}

/* ------------------------------------------------------------------------------------ */
/* the objects a fork child must describe again: live graph allocators and schedulers   */

typedef struct {
    void *obj;
    ggml_lib *L;
    int n;          /* buffer types */
    void **bufts;
    char *rec;      /* its record, as written */
    size_t len;
} live;
typedef struct {
    live *v;
    size_t n, cap;
} lives;
VZ_LOCAL lives g_live_gallocs, g_live_scheds;

VZ_LOCAL live *live_find(lives *ls, const void *obj) {
    for (size_t i = ls->n; i-- > 0;)
        if (ls->v[i].obj == obj) return &ls->v[i];
    return NULL;
}

VZ_LOCAL void live_del(lives *ls, const void *obj) {
    live *e = live_find(ls, obj);
    if (e == NULL) return;
    free(e->bufts);
    free(e->rec);
    *e = ls->v[--ls->n];
}

/* keeps `obj` (a new one at the address of a freed one replaces it); a failed allocation
 * stops recording, never the program */
VZ_LOCAL void live_add(lives *ls, ggml_lib *L, void *obj, void *const *bufts, int n, const rec *r) {
    live_del(ls, obj);
    if (ls->n == ls->cap) {
        size_t cap = ls->cap ? 2 * ls->cap : 64;
        live *v = realloc(ls->v, cap * sizeof *v);
        if (v == NULL) {
            stop_recording();
            return;
        }
        ls->v = v;
        ls->cap = cap;
    }
    live e = {obj, L, n, malloc((size_t)(n > 0 ? n : 1) * sizeof(void *)), malloc(r->len), r->len};
    if (e.bufts == NULL || e.rec == NULL) {
        free(e.bufts);
        free(e.rec);
        stop_recording();
        return;
    }
    if (n > 0) memcpy(e.bufts, bufts, (size_t)n * sizeof(void *));
    memcpy(e.rec, r->p, r->len);
    ls->v[ls->n++] = e;
}

VZ_LOCAL void put_buft(ggml_lib *L, void *buft);

VZ_LOCAL void redescribe(lives *ls) {
    for (size_t i = 0; i < ls->n; i++) {
        live *e = &ls->v[i];
        for (int k = 0; k < e->n; k++) put_buft(e->L, e->bufts[k]);
        memset(e->rec + 24, 0, 8); /* the call that made it was the parent's */
        rec r = {e->rec, e->len, e->len, 1};
        rec_end(&r);
    }
}

/* ------------------------------------------------------------------------------------ */
/* process start and end                                                                */

/* The first records of an image's file: the process, then (in a fork child, which starts
 * knowing what its parent knew) the libraries, graph allocators and schedulers it holds. */
VZ_LOCAL void start_image(void) {
    open_output(); /* first: it finds the image's number */
    char buf[PATH_MAX + 4096 + 128]; /* not the scratch space: the record being ended is there */
    rec r;
    rec_begin_in(&r, R_HELLO, buf, sizeof buf);
    rec_i64(&r, getpid());
    rec_i64(&r, getppid());
    rec_u64(&r, now_ns());
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    rec_str(&r, exe);
    rec_i64(&r, g_image);
    /* the command line, NUL-separated (an exec'd image is told apart by it) */
    char cmd[4096];
    uint32_t len = 0;
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got;
        while (len < sizeof cmd && (got = read(fd, cmd + len, sizeof cmd - len)) > 0) len += (uint32_t)got;
        close(fd);
    }
    rec_put(&r, &len, 4);
    rec_put(&r, cmd, len);
    rec_seal(&r);
    emit(r.p, r.len);
    for (int i = 0; i < g_n_libs; i++)
        if (g_libs[i]->status != 0 || g_libs[i]->reason[0]) put_library(g_libs[i], g_libs[i]->reason);
    redescribe(&g_live_gallocs);
    redescribe(&g_live_scheds);
}

/* fork: no thread of ours may hold the lock across it; the child starts its own capture */
VZ_LOCAL void before_fork(void) { pthread_mutex_lock(&g_lock); }
VZ_LOCAL void after_fork_parent(void) { pthread_mutex_unlock(&g_lock); }

VZ_LOCAL void after_fork_child(void) {
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    g_lock = fresh;
    /* the parent's file stays the parent's: the child's mappings and descriptor go */
    if (g_win) munmap(g_win, g_win_len);
    if (g_head) munmap(g_head, HEADER_SIZE);
    if (same_file(g_fd)) close(g_fd);
    g_fd = -1;
    g_win = NULL;
    g_head = NULL;
    g_win_off = g_win_len = g_file_len = g_end = 0;
    g_said_hello = 0;
    g_opened = 0;
    g_last_tid = 0;
    g_reopened = 0;
    t_tid = 0;
    t_call = 0;
    t_galloc = NULL;
    g_pid = getpid();
    g_image = 0;
    g_generation++; /* every buffer type, buffer and backend is described again */
    memset(g_counts, 0, sizeof g_counts);
    for (int i = 0; i < g_n_libs; i++) {
        memset(g_libs[i]->type_seen, 0, sizeof g_libs[i]->type_seen);
        memset(g_libs[i]->op_seen, 0, sizeof g_libs[i]->op_seen);
    }
    if (g_tensors) memset(g_tensors, 0, g_tcap * sizeof *g_tensors);
    g_tcount = 0;
    g_disabled = g_dir[0] == '\0';
}

__attribute__((constructor)) VZ_LOCAL void vz_init(void) {
    g_pid = getpid();
    const char *dir = getenv("VIZALLOC_CAPTURE_DIR");
    if (dir == NULL || strnlen(dir, sizeof g_dir) >= sizeof g_dir - 64) dir = ""; /* too long: record nothing */
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    g_disabled = g_dir[0] == '\0';
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

typedef struct {
    rec *r;
    void *self;
    int n;
} bye_ctx;

VZ_LOCAL int bye_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    bye_ctx *b = data;
    const char *name = info->dlpi_name;
    if (!name || !name[0] || (void *)info->dlpi_addr == b->self) return 0;
    void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    void *sym = dlsym(h, "ggml_backend_tensor_alloc");
    Dl_info di;
    if (sym && dladdr(sym, &di) && (uintptr_t)di.dli_fbase == (uintptr_t)info->dlpi_addr) {
        rec_str(b->r, name);
        b->n++;
    }
    dlclose(h);
    return 0;
}

/* A process that recorded nothing may still have run ggml: linked into one of its own objects
 * (a Python extension, statically), where ggml's calls bind inside that object and no hook
 * sees them. Each loaded object that defines ggml_init itself is named in a note, so the
 * trace says what was found where instead of "no ggml". */
typedef struct {
    void *self;
    int n;
} unreached_ctx;

/* The process this image was loaded into: a child forked from it that used no ggml of its
 * own (a worker of Python's multiprocessing) says nothing about its parent's ggml. */
VZ_LOCAL pid_t g_image_pid;
__attribute__((constructor)) VZ_LOCAL void vz_note_image_pid(void) { g_image_pid = getpid(); }

VZ_LOCAL int unreached_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    unreached_ctx *u = data;
    const char *name = info->dlpi_name;
    if (!name || !name[0] || (void *)info->dlpi_addr == u->self) return 0;
    void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL) return 0;
    void *sym = dlsym(h, "ggml_init");
    Dl_info di;
    if (sym && dladdr(sym, &di) && (uintptr_t)di.dli_fbase == (uintptr_t)info->dlpi_addr) {
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        if (strncmp(base, "libggml", 7) == 0) /* ggml's own shared library: seen had it been called */
            note("ggml's shared library %s was loaded, but the program called none of its allocator, scheduler, "
                 "buffer or compute functions%s", name, " (it used ggml without them, or not at all)");
        else
            note("ggml is linked into %s (it defines ggml_init itself), so its calls bind inside that object and "
                 "none reached the capture%s", name,
                 ": vizalloc needs ggml as a shared library of its own (build with -DBUILD_SHARED_LIBS=ON)");
        u->n++;
    }
    dlclose(h);
    return 0;
}

/* The end record, the file cut to its records, and nothing recorded after (ggml's own
 * destructors may still call in). An image that recorded nothing says where it found ggml. */
__attribute__((destructor)) VZ_LOCAL void vz_fini(void) {
    if (g_disabled || getpid() != g_pid) return;
    RECORDING {
        if (g_fd < 0 && !g_opened && getpid() == g_image_pid) {
            unreached_ctx u = {self_base(), 0};
            dl_iterate_phdr(unreached_cb, &u);
        }
        if (g_fd >= 0) {
            int mine = own_fd(); /* a reopened file is noted after the end record */
            rec r;
            rec_begin(&r, R_BYE);
            rec_i64(&r, 32);
            for (int i = 0; i < 32; i++) rec_u64(&r, g_counts[i]);
            bye_ctx b = {&r, self_base(), 0};
            dl_iterate_phdr(bye_cb, &b);
            rec_end(&r);
            if (!g_disabled && mine && ftruncate(g_fd, (off_t)g_end) == 0) g_file_len = g_end;
        }
        g_disabled = 1;
    }
}

/* For a program that ends itself without running destructors (_exit, Python's os._exit):
 * the end record, and nothing recorded after. The llama.cpp driver
 * (vizalloc/capture/llama.py) calls it when llama.cpp has measured what was asked and the
 * rest of its start-up is not wanted. Safe to call more than once. */
VZ_EXPORT void vizalloc_capture_finish(void) { vz_fini(); }

/* Every hook: find the real function (under the lock), call it WITHOUT the lock (the real
 * function may wait for threads that call hooks themselves), and record under the lock.
 * Nested hooks (ggml_gallocr_alloc_graph re-planning through ggml_gallocr_reserve_n) are
 * recorded as children of the call that made them. */
VZ_LOCAL ggml_lib *enter(const char *symbol, size_t field, void *caller, int *record) {
    pthread_mutex_lock(&g_lock);
    ggml_lib *L = lib_for(symbol, caller);
    if (L == NULL || *(void **)((char *)L + field) == NULL) {
        pthread_mutex_unlock(&g_lock);
        fprintf(stderr, "vizalloc capture: cannot find the real %s\n", symbol);
        abort();
    }
    *record = !g_disabled && t_inside == 0 && L->status >= 0;
    pthread_mutex_unlock(&g_lock);
    return L;
}

#define ENTER(field, symbol)                           \
    int record;                                        \
    void *caller = __builtin_return_address(0);        \
    ggml_lib *L = enter(symbol, offsetof(ggml_lib, field), caller, &record)

/* One recorded call on this thread's stack: open_call writes its record (with the graph's
 * tensors when `snapshot`) and makes it the thread's innermost open call, with `galloc` as
 * the graph allocator at work (NULL: unchanged); close_call makes the caller's call
 * innermost again. Without `record` neither records nor changes anything. */
typedef struct {
    uint64_t id, saved_call;
    void *saved_galloc;
    int record;
} frame;

VZ_LOCAL frame open_call(ggml_lib *L, int record, int kind, void *object, void *graph, const int *node_ids,
                         const int *leaf_ids, int snapshot, void *caller, void *galloc) {
    frame f = {0, t_call, t_galloc, record};
    if (!record) return f;
    RECORDING {
        f.id = g_next_call++;
        g_counts[kind]++;
        if (snapshot) put_graph_tensors(L, graph);
        put_call(L, f.id, t_call, kind, object, graph, node_ids, leaf_ids, caller);
    }
    t_call = f.id;
    if (galloc) t_galloc = galloc;
    return f;
}

VZ_LOCAL void close_call(const frame *f) {
    if (!f->record) return;
    t_call = f->saved_call;
    t_galloc = f->saved_galloc;
}

/* The functions VIZALLOC_CAPTURE_STOP_AFTER may name, by call kind. */
VZ_LOCAL const char *const g_stop_names[] = {
    [C_GALLOC_RESERVE_N] = "ggml_gallocr_reserve_n", [C_GALLOC_RESERVE_N_SIZE] = "ggml_gallocr_reserve_n_size",
    [C_SCHED_RESERVE_SIZE] = "ggml_backend_sched_reserve_size",
};

/* VIZALLOC_CAPTURE_STOP_AFTER=<function>: the process ends (exit status 0) when the first
 * outermost call of that function returns, once its record is written. For a program run
 * only to see one plan, whose start-up would go on to do expensive work (llama.cpp creates
 * a real context after measuring one without memory; vizalloc/capture/llama.py --no-alloc).
 * Read when such a call returns, so the program may set it after it started. */
VZ_LOCAL int stop_here(int kind) {
    if (kind <= 0 || kind >= (int)(sizeof g_stop_names / sizeof g_stop_names[0]) || !g_stop_names[kind]) return 0;
    const char *want = getenv("VIZALLOC_CAPTURE_STOP_AFTER");
    return want != NULL && strcmp(want, g_stop_names[kind]) == 0;
}

/* The call's return record (after close_call: `t_call == 0` is the outermost call). */
VZ_LOCAL void end_call(ggml_lib *L, const frame *f, int kind, void *graph, int64_t result, const size_t *sizes,
                       int n_sizes, int snapshot) {
    if (!f->record) return;
    RECORDING {
        if (snapshot) put_graph_tensors(L, graph);
        put_return(f->id, kind, result, sizes, n_sizes);
    }
    if (t_call == 0 && stop_here(kind)) {
        vizalloc_capture_finish();
        _exit(0);
    }
}

/* ------------------------------------------------------------------------------------ */
/* graph allocator                                                                      */

/* buffer counts of the live graph allocators, for ggml_gallocr_reserve_n_size's sizes */
VZ_LOCAL int galloc_n_bufs(void *galloc) {
    int n = 0;
    RECORDING {
        live *e = live_find(&g_live_gallocs, galloc);
        n = e ? e->n : 0;
    }
    return n;
}

VZ_LOCAL void put_galloc(ggml_lib *L, void *galloc, void **bufts, int n) {
    RECORDING {
        for (int i = 0; i < n; i++) put_buft(L, bufts[i]);
        rec r;
        rec_begin(&r, R_GALLOC);
        rec_i64(&r, L->id);
        rec_ptr(&r, galloc);
        rec_u64(&r, t_call);
        rec_i64(&r, n);
        for (int i = 0; i < n; i++) rec_ptr(&r, bufts[i]);
        rec_end(&r);
        if (r.ok) live_add(&g_live_gallocs, L, galloc, bufts, n, &r);
    }
}

VZ_EXPORT void *ggml_gallocr_new_n(void **bufts, int n_bufs) {
    ENTER(gallocr_new_n, "ggml_gallocr_new_n");
    void *g = L->gallocr_new_n(bufts, n_bufs);
    if (record && g) put_galloc(L, g, bufts, n_bufs);
    return g;
}

VZ_EXPORT void *ggml_gallocr_new(void *buft) {
    ENTER(gallocr_new, "ggml_gallocr_new");
    void *g = NULL;
    UNRECORDED g = L->gallocr_new(buft); /* it calls ggml_gallocr_new_n: recorded here, once */
    if (record && g) put_galloc(L, g, &buft, 1);
    return g;
}

VZ_EXPORT void ggml_gallocr_free(void *galloc) {
    ENTER(gallocr_free, "ggml_gallocr_free");
    frame f = open_call(L, record, C_GALLOC_FREE, galloc, NULL, NULL, NULL, 0, caller, NULL);
    L->gallocr_free(galloc); /* frees its chunk buffers through ggml_backend_buffer_free */
    close_call(&f);
    end_call(L, &f, C_GALLOC_FREE, NULL, 0, NULL, 0, 0);
    RECORDING live_del(&g_live_gallocs, galloc);
}

/* reserve_n, reserve_n_size and alloc_graph: the graph before and after the call */
VZ_EXPORT bool ggml_gallocr_reserve_n(void *galloc, void *graph, const int *node_ids, const int *leaf_ids) {
    ENTER(gallocr_reserve_n, "ggml_gallocr_reserve_n");
    frame f = open_call(L, record, C_GALLOC_RESERVE_N, galloc, graph, node_ids, leaf_ids, 1, caller, galloc);
    bool result = L->gallocr_reserve_n(galloc, graph, node_ids, leaf_ids);
    close_call(&f);
    end_call(L, &f, C_GALLOC_RESERVE_N, graph, result, NULL, 0, 1);
    return result;
}

VZ_EXPORT bool ggml_gallocr_reserve(void *galloc, void *graph) {
    /* forwards to ggml_gallocr_reserve_n, recorded there (with no buffer ids) */
    ENTER(gallocr_reserve, "ggml_gallocr_reserve");
    (void)record;
    return L->gallocr_reserve(galloc, graph);
}

VZ_EXPORT void ggml_gallocr_reserve_n_size(void *galloc, void *graph, const int *node_ids, const int *leaf_ids,
                                           size_t *sizes) {
    ENTER(gallocr_reserve_n_size, "ggml_gallocr_reserve_n_size");
    int n = record ? galloc_n_bufs(galloc) : 0;
    frame f = open_call(L, record, C_GALLOC_RESERVE_N_SIZE, galloc, graph, node_ids, leaf_ids, 1, caller, galloc);
    L->gallocr_reserve_n_size(galloc, graph, node_ids, leaf_ids, sizes);
    close_call(&f);
    end_call(L, &f, C_GALLOC_RESERVE_N_SIZE, graph, 1, sizes, n, 1);
}

VZ_EXPORT bool ggml_gallocr_alloc_graph(void *galloc, void *graph) {
    ENTER(gallocr_alloc_graph, "ggml_gallocr_alloc_graph");
    frame f = open_call(L, record, C_GALLOC_ALLOC_GRAPH, galloc, graph, NULL, NULL, 1, caller, galloc);
    bool result = L->gallocr_alloc_graph(galloc, graph);
    close_call(&f);
    end_call(L, &f, C_GALLOC_ALLOC_GRAPH, graph, result, NULL, 0, 1);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* the scheduler                                                                        */

VZ_EXPORT void *ggml_backend_sched_new(void **backends, void **bufts, int n_backends, size_t graph_size, bool parallel,
                                       bool op_offload) {
    ENTER(sched_new, "ggml_backend_sched_new");
    uint64_t saved = t_call, id = 0;
    if (record) {
        RECORDING id = g_next_call++;
        t_call = id; /* the graph allocator it makes names this call as its parent */
    }
    void *s = L->sched_new(backends, bufts, n_backends, graph_size, parallel, op_offload);
    t_call = saved;
    if (record && s) {
        int n = n_backends > 0 ? n_backends : 0;
        void **chosen = calloc((size_t)(n ? n : 1), sizeof *chosen);
        RECORDING {
            if (chosen == NULL) {
                stop_recording();
            } else {
                for (int i = 0; i < n; i++) {
                    chosen[i] = bufts ? bufts[i] : NULL;
                    if (chosen[i] == NULL && L->sched_get_buffer_type)
                        chosen[i] = L->sched_get_buffer_type(s, backends[i]);
                    put_buft(L, chosen[i]);
                }
                rec r;
                rec_begin(&r, R_SCHED);
                rec_i64(&r, L->id);
                rec_ptr(&r, s);
                rec_u64(&r, id);
                rec_i64(&r, n);
                for (int i = 0; i < n; i++) {
                    rec_ptr(&r, backends[i]);
                    rec_ptr(&r, chosen[i]);
                    rec_str(&r, L->backend_name ? L->backend_name(backends[i]) : "?");
                }
                rec_end(&r);
                if (r.ok) live_add(&g_live_scheds, L, s, chosen, n, &r);
                else note("a scheduler with %s backends did not fit one record: it was not described%s", "many", "");
            }
        }
        free(chosen);
    }
    return s;
}

VZ_EXPORT void ggml_backend_sched_free(void *sched) {
    ENTER(sched_free, "ggml_backend_sched_free");
    frame f = open_call(L, record, C_SCHED_FREE, sched, NULL, NULL, NULL, 0, caller, NULL);
    L->sched_free(sched);
    close_call(&f);
    end_call(L, &f, C_SCHED_FREE, NULL, 0, NULL, 0, 0);
    RECORDING live_del(&g_live_scheds, sched);
}

VZ_EXPORT void ggml_backend_sched_reset(void *sched) {
    ENTER(sched_reset, "ggml_backend_sched_reset");
    frame f = open_call(L, record, C_SCHED_RESET, sched, NULL, NULL, NULL, 0, caller, NULL);
    L->sched_reset(sched);
    close_call(&f);
    end_call(L, &f, C_SCHED_RESET, NULL, 0, NULL, 0, 0);
}

/* After a scheduler reserve/alloc: how many splits, and each node's backend */
VZ_LOCAL void put_sched_result(ggml_lib *L, const frame *f, int kind, void *sched, void *graph, int64_t result) {
    if (!f->record) return;
    RECORDING {
        put_graph_tensors(L, graph);
        int n_nodes = (graph && L->status >= 0 && graph_layout_ok(L, graph)) ? RD(int, graph, G_OFF_N_NODES) : 0;
        void **nodes = n_nodes ? RD(void **, graph, G_OFF_NODES) : NULL;
        /* one record holds the backends of ~130k nodes; beyond that none are written, and a note says so */
        int fits = n_nodes <= (int)((SCRATCH_CAP - 64) / 8);
        if (!fits) note("a scheduler graph of more nodes than one record holds: its nodes' backends were not written%s%s",
                        "", "");
        rec r;
        rec_begin(&r, R_RETURN);
        rec_u64(&r, f->id);
        rec_i64(&r, kind);
        rec_i64(&r, result);
        rec_u64(&r, now_ns());
        rec_i64(&r, -1); /* scheduler facts follow instead of sizes */
        rec_i64(&r, L->sched_get_n_splits ? L->sched_get_n_splits(sched) : -1);
        int n = (L->sched_get_tensor_backend && fits) ? n_nodes : 0;
        rec_i64(&r, n);
        for (int i = 0; i < n; i++) rec_ptr(&r, L->sched_get_tensor_backend(sched, nodes[i]));
        rec_end(&r);
    }
}

VZ_EXPORT bool ggml_backend_sched_reserve(void *sched, void *graph) {
    ENTER(sched_reserve, "ggml_backend_sched_reserve");
    frame f = open_call(L, record, C_SCHED_RESERVE, sched, graph, NULL, NULL, 1, caller, NULL);
    bool ok = L->sched_reserve(sched, graph);
    close_call(&f);
    put_sched_result(L, &f, C_SCHED_RESERVE, sched, graph, ok);
    return ok;
}

VZ_EXPORT void ggml_backend_sched_reserve_size(void *sched, void *graph, size_t *sizes) {
    ENTER(sched_reserve_size, "ggml_backend_sched_reserve_size");
    frame f = open_call(L, record, C_SCHED_RESERVE_SIZE, sched, graph, NULL, NULL, 1, caller, NULL);
    L->sched_reserve_size(sched, graph, sizes);
    close_call(&f);
    int n = record && L->sched_get_n_backends ? L->sched_get_n_backends(sched) : 0;
    end_call(L, &f, C_SCHED_RESERVE_SIZE, graph, 1, sizes, n, 1);
}

VZ_EXPORT bool ggml_backend_sched_alloc_graph(void *sched, void *graph) {
    ENTER(sched_alloc_graph, "ggml_backend_sched_alloc_graph");
    frame f = open_call(L, record, C_SCHED_ALLOC_GRAPH, sched, graph, NULL, NULL, 1, caller, NULL);
    bool ok = L->sched_alloc_graph(sched, graph);
    close_call(&f);
    put_sched_result(L, &f, C_SCHED_ALLOC_GRAPH, sched, graph, ok);
    return ok;
}

VZ_LOCAL void put_backend(ggml_lib *L, void *backend) {
    RECORDING {
        if (!described(&g_backends, backend)) {
            mark(&g_backends, backend);
            rec r;
            rec_begin(&r, R_BACKEND);
            rec_i64(&r, L->id);
            rec_ptr(&r, backend);
            rec_str(&r, L->backend_name ? L->backend_name(backend) : "?");
            rec_end(&r);
        }
    }
}

/* Graph computes: the graph's tensors at the start, the status at the end. */
#define COMPUTE_HOOK(NAME, FIELD, KIND)                                                        \
    VZ_EXPORT int NAME(void *object, void *graph) {                                            \
        ENTER(FIELD, #NAME);                                                                   \
        if (record && (KIND == C_BACKEND_COMPUTE || KIND == C_BACKEND_COMPUTE_ASYNC))          \
            put_backend(L, object);                                                            \
        frame f = open_call(L, record, KIND, object, graph, NULL, NULL, 1, caller, NULL);      \
        int status = L->FIELD(object, graph);                                                  \
        close_call(&f);                                                                        \
        end_call(L, &f, KIND, NULL, status, NULL, 0, 0);                                       \
        return status;                                                                         \
    }

COMPUTE_HOOK(ggml_backend_sched_graph_compute, sched_graph_compute, C_SCHED_COMPUTE)
COMPUTE_HOOK(ggml_backend_sched_graph_compute_async, sched_graph_compute_async, C_SCHED_COMPUTE_ASYNC)
COMPUTE_HOOK(ggml_backend_graph_compute, backend_graph_compute, C_BACKEND_COMPUTE)
COMPUTE_HOOK(ggml_backend_graph_compute_async, backend_graph_compute_async, C_BACKEND_COMPUTE_ASYNC)

/* ------------------------------------------------------------------------------------ */
/* buffers and placements                                                               */

VZ_EXPORT void *ggml_backend_buft_alloc_buffer(void *buft, size_t size) {
    ENTER(buft_alloc_buffer, "ggml_backend_buft_alloc_buffer");
    void *b = L->buft_alloc_buffer(buft, size);
    if (record) {
        RECORDING {
            g_counts[C_BUFT_ALLOC_BUFFER]++;
            if (b) {
                pmap_del(&g_freed, b);
                put_buffer(L, b, HOW_ALLOC);
            } else {
                put_buft(L, buft);
                char what[64];
                snprintf(what, sizeof what, "%zu", size);
                note("ggml_backend_buft_alloc_buffer failed for %s bytes of %s", what, L->buft_name(buft));
            }
        }
    }
    return b;
}

VZ_EXPORT void ggml_backend_buffer_free(void *buffer) {
    ENTER(buffer_free, "ggml_backend_buffer_free");
    if (buffer) {
        RECORDING {
            if (record) {
                put_buffer(L, buffer, HOW_SEEN);
                rec r;
                rec_begin(&r, R_BUFFER_FREE);
                rec_ptr(&r, buffer);
                rec_u64(&r, t_call);
                rec_end(&r);
                int multi = L->buffer_is_multi ? L->buffer_is_multi(buffer) : 0;
                size_t size = L->buffer_get_size(buffer);
                freed_add(buffer, (size && !multi) ? (uintptr_t)L->buffer_get_base(buffer) : 0, size);
                forget_tensors_in(buffer);
            }
            pmap_del(&g_buffers, buffer);
        }
    }
    L->buffer_free(buffer);
}

VZ_LOCAL void put_buffer_event(ggml_lib *L, int kind, void *buffer, int64_t value) {
    RECORDING {
        put_buffer(L, buffer, HOW_SEEN);
        rec r;
        rec_begin(&r, kind);
        rec_ptr(&r, buffer);
        rec_i64(&r, value);
        rec_end(&r);
    }
}

VZ_EXPORT void ggml_backend_buffer_clear(void *buffer, uint8_t value) {
    ENTER(buffer_clear, "ggml_backend_buffer_clear");
    if (record && buffer) put_buffer_event(L, R_BUFFER_CLEAR, buffer, value);
    L->buffer_clear(buffer, value);
}

VZ_EXPORT void ggml_backend_buffer_set_usage(void *buffer, int usage) {
    ENTER(buffer_set_usage, "ggml_backend_buffer_set_usage");
    L->buffer_set_usage(buffer, usage);
    if (record && buffer) put_buffer_event(L, R_BUFFER_USAGE, buffer, usage);
}

VZ_LOCAL void put_place(ggml_lib *L, int kind, void *tensor, void *buffer, void *addr, int result) {
    RECORDING {
        g_counts[kind == PLACE_TENSOR_ALLOC ? 20 : 21]++;
        put_buffer(L, buffer, HOW_SEEN);
        put_tensor_deep(L, tensor);
        if (buffer && L->buft_get_alloc_size && L->status == 1) {
            void *buft = L->buffer_get_type(buffer);
            size_t want = L->buft_get_alloc_size(buft, tensor);
            if (want != L->nbytes(tensor)) {
                rec a;
                rec_begin(&a, R_ALLOC_SIZE);
                rec_i64(&a, L->id);
                rec_ptr(&a, buft);
                rec_ptr(&a, tensor);
                rec_u64(&a, want);
                rec_end(&a);
            }
        }
        rec r;
        rec_begin(&r, R_PLACE);
        rec_u64(&r, t_call);
        rec_i64(&r, kind);
        rec_ptr(&r, tensor);
        rec_ptr(&r, buffer);
        rec_ptr(&r, addr);
        rec_i64(&r, result);
        rec_end(&r);
    }
}

VZ_EXPORT int ggml_backend_tensor_alloc(void *buffer, void *tensor, void *addr) {
    ENTER(tensor_alloc, "ggml_backend_tensor_alloc");
    int result = L->tensor_alloc(buffer, tensor, addr);
    if (record) put_place(L, PLACE_TENSOR_ALLOC, tensor, buffer, addr, result);
    return result;
}

VZ_EXPORT int ggml_backend_view_init(void *tensor) {
    ENTER(view_init, "ggml_backend_view_init");
    int result = L->view_init(tensor);
    if (record && tensor)
        put_place(L, PLACE_VIEW_INIT, tensor, RD(void *, tensor, OFF_BUFFER), RD(void *, tensor, OFF_DATA), result);
    return result;
}

/* ------------------------------------------------------------------------------------ */
/* the program's reads and writes of tensor bytes (writes straight into host memory     */
/* through tensor->data are not seen: the importer says so)                             */

VZ_LOCAL void put_io(ggml_lib *L, int kind, const void *tensor, size_t offset, size_t size, const void *src) {
    RECORDING {
        g_counts[kind == IO_SET ? 22 : kind == IO_GET ? 23 : kind == IO_MEMSET ? 24 : 25]++;
        if (src) put_tensor_deep(L, src);
        put_tensor_deep(L, tensor);
        rec r;
        rec_begin(&r, R_IO);
        rec_i64(&r, kind);
        rec_ptr(&r, tensor);
        rec_u64(&r, offset);
        rec_u64(&r, size);
        rec_ptr(&r, src);
        rec_u64(&r, t_call);
        rec_end(&r);
    }
}

VZ_EXPORT void ggml_backend_tensor_set(void *tensor, const void *data, size_t offset, size_t size) {
    ENTER(tensor_set, "ggml_backend_tensor_set");
    (void)caller;
    L->tensor_set(tensor, data, offset, size);
    if (record && tensor) put_io(L, IO_SET, tensor, offset, size, NULL);
}

VZ_EXPORT void ggml_backend_tensor_get(const void *tensor, void *data, size_t offset, size_t size) {
    ENTER(tensor_get, "ggml_backend_tensor_get");
    (void)caller;
    if (record && tensor) put_io(L, IO_GET, tensor, offset, size, NULL);
    L->tensor_get(tensor, data, offset, size);
}

VZ_EXPORT void ggml_backend_tensor_set_async(void *backend, void *tensor, const void *data, size_t offset,
                                             size_t size) {
    ENTER(tensor_set_async, "ggml_backend_tensor_set_async");
    (void)caller;
    L->tensor_set_async(backend, tensor, data, offset, size);
    if (record && tensor) put_io(L, IO_SET, tensor, offset, size, NULL);
}

VZ_EXPORT void ggml_backend_tensor_get_async(void *backend, const void *tensor, void *data, size_t offset,
                                             size_t size) {
    ENTER(tensor_get_async, "ggml_backend_tensor_get_async");
    (void)caller;
    if (record && tensor) put_io(L, IO_GET, tensor, offset, size, NULL);
    L->tensor_get_async(backend, tensor, data, offset, size);
}

VZ_EXPORT void ggml_backend_tensor_memset(void *tensor, uint8_t value, size_t offset, size_t size) {
    ENTER(tensor_memset, "ggml_backend_tensor_memset");
    (void)caller;
    L->tensor_memset(tensor, value, offset, size);
    if (record && tensor) put_io(L, IO_MEMSET, tensor, offset, size, NULL);
}

VZ_EXPORT void ggml_backend_tensor_copy(void *src, void *dst) {
    ENTER(tensor_copy, "ggml_backend_tensor_copy");
    (void)caller;
    L->tensor_copy(src, dst);
    if (record && src && dst) put_io(L, IO_COPY, dst, 0, 0, src);
}

/* ------------------------------------------------------------------------------------ */
/* ggml without the graph allocator: ggml-cpu's own graph computes over context memory  */
/* (ggml_graph_compute_with_ctx, as ggml's test-pool and gpt-2-ctx use it). They live in */
/* libggml-cpu, not in the libggml-base whose entry the other hooks use, so the real     */
/* function is looked up by itself; the tensors are described through that base library. */

/* The definition of `name` that is not ours: the next one in the global scope, else the
 * first loaded object (RTLD_LOCAL ones too) that defines it itself. */
VZ_LOCAL void *real_symbol(const char *name) {
    void *sym = dlsym(RTLD_NEXT, name);
    if (sym != NULL) return sym;
    find_ctx fc = {name, self_base(), NULL, {0}};
    dl_iterate_phdr(find_cb, &fc);
    if (fc.found_handle) sym = dlsym(fc.found_handle, name); /* the handle stays open: the object stays loaded */
    return sym;
}

VZ_LOCAL void *cpu_entry(void **cache, const char *name, void *caller, ggml_lib **L, int *record) {
    pthread_mutex_lock(&g_lock);
    if (*cache == NULL) *cache = real_symbol(name);
    void *real = *cache;
    *L = real ? lib_for("ggml_backend_tensor_alloc", caller) : NULL;
    *record = *L != NULL && !g_disabled && t_inside == 0 && (*L)->status >= 0;
    pthread_mutex_unlock(&g_lock);
    if (real == NULL) {
        fprintf(stderr, "vizalloc capture: cannot find the real %s\n", name);
        abort();
    }
    return real;
}

VZ_EXPORT int ggml_graph_compute(void *graph, void *cplan) {
    static void *real_fn;
    int record;
    ggml_lib *L;
    void *caller = __builtin_return_address(0);
    int (*real)(void *, void *) = (int (*)(void *, void *))cpu_entry(&real_fn, "ggml_graph_compute", caller, &L,
                                                                       &record);
    frame f = open_call(L, record, C_GRAPH_COMPUTE, NULL, graph, NULL, NULL, 1, caller, NULL);
    int status = real(graph, cplan);
    close_call(&f);
    end_call(L, &f, C_GRAPH_COMPUTE, NULL, status, NULL, 0, 0);
    return status;
}

VZ_EXPORT int ggml_graph_compute_with_ctx(void *ctx, void *graph, int n_threads) {
    static void *real_fn;
    int record;
    ggml_lib *L;
    void *caller = __builtin_return_address(0);
    int (*real)(void *, void *, int) = (int (*)(void *, void *, int))cpu_entry(
        &real_fn, "ggml_graph_compute_with_ctx", caller, &L, &record);
    frame f = open_call(L, record, C_GRAPH_COMPUTE_WITH_CTX, ctx, graph, NULL, NULL, 1, caller, NULL);
    int status = real(ctx, graph, n_threads);
    close_call(&f);
    end_call(L, &f, C_GRAPH_COMPUTE_WITH_CTX, NULL, status, NULL, 0, 0);
    return status;
}

/* ------------------------------------------------------------------------------------ */
/* ggml's tensor allocator: every tensor of a context placed in a new buffer, in order     */
/* (weights, KV caches, ggml-opt's static tensors). The placements inside are recorded as  */
/* usual; the call around them lets the replay re-run the allocator and check each offset. */

VZ_EXPORT void *ggml_backend_alloc_ctx_tensors_from_buft(void *ctx, void *buft) {
    ENTER(tensor_alloc, "ggml_backend_alloc_ctx_tensors_from_buft");
    void *(*real)(void *, void *) = NULL;
    RECORDING {
        if (L->real_alloc_ctx_tensors == NULL) {
            void *sym = dlsym(L->handle, "ggml_backend_alloc_ctx_tensors_from_buft");
            Dl_info di;
            if (sym && dladdr(sym, &di) && di.dli_fbase != self_base()) L->real_alloc_ctx_tensors = sym;
        }
        real = (void *(*)(void *, void *))L->real_alloc_ctx_tensors;
        if (record && real) put_buft(L, buft);
    }
    if (real == NULL) {
        fprintf(stderr, "vizalloc capture: cannot find the real ggml_backend_alloc_ctx_tensors_from_buft\n");
        abort();
    }
    frame f = open_call(L, record, C_ALLOC_CTX_TENSORS, ctx, NULL, NULL, NULL, 0, caller, NULL);
    void *buffer = real(ctx, buft);
    close_call(&f);
    end_call(L, &f, C_ALLOC_CTX_TENSORS, NULL, buffer != NULL, NULL, 0, 0);
    return buffer;
}
