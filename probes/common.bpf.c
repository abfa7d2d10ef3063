/* Maps and helpers shared by every probe. UPPERCASE tokens are substituted by the loader
 * (readtrace/record/program.py): kernel struct offsets from BTF, ring sizes, switches. */

#ifndef READTRACE_COMMON_BPF_C
#define READTRACE_COMMON_BPF_C

#include "readtrace.h"

BPF_RINGBUF_OUTPUT(events, EVENTS_RING_PAGES);
BPF_RINGBUF_OUTPUT(strs, STRS_RING_PAGES);
BPF_PERCPU_ARRAY(lost, u64, 2);               /* [0] events ring full, [1] strs ring full, map full or slot clash */

/* Arrays indexed by pid, not hashes: every handler starts with this lookup, and an array lookup
 * is inlined by the verifier (a hash costs ~70 ns more per hit). PID_LIMIT is the kernel's
 * PID_MAX_LIMIT, so any pid fits. */
BPF_ARRAY(tgids, u8, PID_LIMIT);              /* traced processes */
BPF_ARRAY(tids, u32, PID_LIMIT);              /* traced threads -> their process (kept after exit) */

/* Per-thread state lives in SLOTS slots indexed by tid % SLOTS, each tagged with its owner tid.
 * Two threads in flight at once with the same slot cannot both be kept: the clash is counted in
 * lost[1], never silent. */
struct inflight {                             /* a syscall between sys_enter and sys_exit */
    u32 tid;                                  /* owner; 0 = free */
    u32 pad;
    u64 ts_ns;
    u64 ofd;
    u64 ino;
    s64 offset;
    s64 size;
    s64 arg;
    u64 ptr;                                  /* open: user filename */
    s32 fd;
    u32 dev;
    u16 kind;
};
BPF_ARRAY(inflight, struct inflight, SLOTS);

static __always_inline void count_lost(int which)
{
    u64 *n = lost.lookup(&which);
    if (n)
        *n += 1;
}

static __always_inline u32 current_tgid(void) { return bpf_get_current_pid_tgid() >> 32; }
static __always_inline u32 current_tid(void) { return (u32)bpf_get_current_pid_tgid(); }
static __always_inline u32 slot_of(u32 tid) { return tid & (SLOTS - 1); }

/* First test of every handler: is the current process part of the traced tree? */
static __always_inline int traced(void)
{
    u32 tgid = current_tgid();
    u8 *on = tgids.lookup(&tgid);
    return on && *on;
}

/* The in-flight slot of the current thread for a new syscall (NULL: slot array unavailable). */
static __always_inline struct inflight *inflight_claim(u32 tid)
{
    u32 slot = slot_of(tid);
    struct inflight *f = inflight.lookup(&slot);
    if (f && f->tid && f->tid != tid)
        count_lost(1);                        /* another thread's syscall shares this slot */
    return f;
}

/* Claim the current thread's slot for a syscall of ``kind`` starting now (NULL: unavailable). */
static __always_inline struct inflight *inflight_begin(u16 kind)
{
    u32 tid = current_tid();
    struct inflight *f = inflight_claim(tid);
    if (!f)
        return 0;
    f->tid = tid;
    f->ts_ns = bpf_ktime_get_ns();
    f->kind = kind;
    return f;
}

/* The current thread's in-flight syscall, or NULL (not ours: never started, or taken over). */
static __always_inline struct inflight *inflight_mine(u32 tid)
{
    u32 slot = slot_of(tid);
    struct inflight *f = inflight.lookup(&slot);
    return f && f->tid == tid ? f : 0;
}

static __always_inline u64 read_ptr(u64 addr)
{
    u64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

/* struct file * of fd in the current task: task->files->fdt->fd[fd]. While the table was never
 * expanded (fdt == &files->fdtab, fds < NR_OPEN_DEFAULT) the array is files->fd_array: one read less. */
static __always_inline u64 fd_to_file(s32 fd)
{
    u64 files, fdt;
    struct { u32 max_fds; u32 pad; u64 fd; } table = {};  /* struct fdtable's first two members */
    if (fd < 0)
        return 0;
    files = read_ptr(bpf_get_current_task() + TASK_FILES);
    if (!files)
        return 0;
    fdt = read_ptr(files + FILES_FDT);
    if (!fdt)
        return 0;
    if (fdt == files + FILES_FDTAB && fd < NR_OPEN_DEFAULT)
        return read_ptr(files + FILES_FD_ARRAY + (u64)fd * 8);
    bpf_probe_read_kernel(&table, sizeof(table), (void *)fdt);
    if ((u32)fd >= table.max_fds || !table.fd)
        return 0;
    return read_ptr(table.fd + (u64)fd * 8);
}

/* The struct file of the fd a thread read last, so a read storm resolves fd -> file (3 kernel reads)
 * once instead of per call. An entry is valid while its process's fd epoch is unchanged: close,
 * close_range, dup2/dup3 (at entry and exit) and exec bump it. Epochs are SLOTS counters indexed by
 * tgid: processes that share a counter only invalidate each other's entries more often. */
struct fd_cache {
    u32 tid;
    u32 tgid;
    u32 epoch;
    s32 fd;
    u64 file;
};
BPF_ARRAY(fd_cache, struct fd_cache, SLOTS);
BPF_ARRAY(fd_epochs, u32, SLOTS);

/* The fd table of process ``tgid`` changed (or is about to): every cached fd -> file of it is stale. */
static __always_inline void fd_table_of_changed(u32 tgid)
{
    u32 slot = slot_of(tgid);
    u32 *epoch = fd_epochs.lookup(&slot);
    if (epoch)
        __sync_fetch_and_add(epoch, 1);
}

static __always_inline void fd_table_changed(void) { fd_table_of_changed(current_tgid()); }

static __always_inline u64 fd_to_file_cached(s32 fd)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tid = id, tgid = id >> 32, slot = slot_of(tid), eslot = slot_of(tgid);
    u32 *epoch = fd_epochs.lookup(&eslot);
    struct fd_cache *c = fd_cache.lookup(&slot);
    if (!c || !epoch)
        return fd_to_file(fd);
    if (c->file && c->tid == tid && c->tgid == tgid && c->fd == fd && c->epoch == *epoch)
        return c->file;
    c->epoch = *epoch;                        /* before the lookup: a close racing with it invalidates */
    c->file = fd_to_file(fd);
    c->tid = tid;
    c->tgid = tgid;
    c->fd = fd;
    return c->file;
}

/* dev (major<<20|minor, like the tracepoints) and ino of a struct file's inode. */
static __always_inline void file_dev_ino(u64 file, u32 *dev, u64 *ino)
{
    u64 inode, sb;
    *dev = 0;
    *ino = 0;
    if (!file)
        return;
    inode = read_ptr(file + FILE_F_INODE);
    if (!inode)
        return;
    bpf_probe_read_kernel(ino, sizeof(*ino), (void *)(inode + INODE_I_INO));
    sb = read_ptr(inode + INODE_I_SB);
    if (sb)
        bpf_probe_read_kernel(dev, sizeof(*dev), (void *)(sb + SUPER_BLOCK_S_DEV));
}

/* A record's head: now, the current task, one hit of ``kind``. */
static __always_inline void head_now(struct rt_head *h, u16 kind)
{
    h->ts_ns = bpf_ktime_get_ns();
    h->pid = current_tgid();
    h->tid = current_tid();
    h->kind = kind;
    h->count = 1;
}

static __always_inline void submit_event(struct rt_event *src)
{
    struct rt_event *e = events.ringbuf_reserve(sizeof(struct rt_event));
    if (!e) {
        count_lost(0);
        return;
    }
    __builtin_memcpy(e, src, sizeof(*e));
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

#endif
