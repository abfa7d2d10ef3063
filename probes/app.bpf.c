/* Application view: the syscalls of the traced tree (dispatched from raw sys_enter/sys_exit in
 * syscalls.bpf.c). Each sys_enter fills the thread's struct inflight slot; the matching sys_exit
 * completes it into one rt_event (its io member). Consecutive full reads of the same
 * size by one thread on one open file description are merged in kernel (count = calls merged) so a
 * 4 KiB read storm costs one record per run, with exact call and byte counts. */

#ifndef READTRACE_APP_BPF_C
#define READTRACE_APP_BPF_C

#include "common.bpf.c"

struct run {
    struct rt_event ev;                       /* ev.h.count == 0: empty; ev.h.tid: owner */
    s64 unit;                                 /* requested size of every call in the run */
};
BPF_ARRAY(runs, struct run, SLOTS);

struct map_key {
    u32 tgid;
    u32 pad;
    u64 addr;
};
struct map_val {
    u64 ofd;
    u64 ino;
    u32 dev;
};
BPF_HASH(mmaps, struct map_key, struct map_val, 65536);   /* file mappings, for munmap */

/* Reads skip the inode lookup (4 kernel reads per call): the decoder names their file from the
 * open that created the same struct file. Rarer calls carry dev/ino themselves. */
static __always_inline int io_enter_at(u16 kind, s32 fd, s64 offset, s64 size, s64 arg, int use_pos)
{
    struct inflight *f = inflight_begin(kind);
    if (!f)
        return 0;
    f->fd = fd;
    f->size = size;
    f->arg = arg;
    f->dev = 0;
    f->ino = 0;
    if (kind <= RT_PREADV) {
        f->ofd = fd_to_file_cached(fd);       /* a read storm: the same fd call after call */
    } else {
        f->ofd = fd_to_file(fd);
        file_dev_ino(f->ofd, &f->dev, &f->ino);
    }
    if (use_pos && f->ofd)                    /* read()/readv(): the offset is the file position */
        bpf_probe_read_kernel(&offset, sizeof(offset), (void *)(f->ofd + FILE_F_POS));
    f->offset = offset;
    return 0;
}

static __always_inline s64 iov_bytes(u64 vec, u64 vlen)
{
    s64 total = 0;
    u64 len;
#pragma unroll
    for (int i = 0; i < IOV_MAX_SUMMED; i++) {
        if (i >= vlen)
            break;
        len = 0;
        bpf_probe_read_user(&len, sizeof(len), (void *)(vec + i * 16 + 8));
        total += len;
    }
    return total;
}

/* Submit the thread's pending run, if it has one. */
static __always_inline void flush_run(u32 tid)
{
    u32 slot = slot_of(tid);
    struct run *r = runs.lookup(&slot);
    if (!r || !r->ev.h.count || r->ev.h.tid != tid)
        return;
    submit_event(&r->ev);
    r->ev.h.count = 0;
}

/* A complete read that continues this thread's run (same kind, file and call size, offset == the
 * run's end, within RUN_SPAN_NS so plots stay true) is counted into the run in place: no record is
 * built. Returns 0 when it does not continue the run. */
static __always_inline int extend_run(struct inflight *f, u32 tid, s64 ret, u64 latency)
{
    u32 slot = slot_of(tid);
    struct run *r;
    if (!COALESCE || f->size <= 0 || ret != f->size || !f->ofd)
        return 0;
    r = runs.lookup(&slot);
    if (!r || !r->ev.h.count || r->ev.h.tid != tid || r->ev.h.kind != f->kind || r->ev.io.file != f->ofd
        || r->ev.io.offset + r->ev.io.ret != f->offset || r->unit != f->size
        || f->ts_ns - r->ev.h.ts_ns >= RUN_SPAN_NS)
        return 0;
    r->ev.h.count += 1;
    r->ev.io.size += f->size;
    r->ev.io.ret += ret;
    r->ev.io.latency_ns += latency;
    return 1;
}

/* A completed read that did not extend the run (extend_run): flush the slot's run, and start a new
 * run with this read when it is complete, else submit it alone. */
static __always_inline void emit_read(struct rt_event *e)
{
    u32 slot = slot_of(e->h.tid);
    int full = COALESCE && e->io.size > 0 && e->io.ret == e->io.size && e->io.file;
    struct run *r = runs.lookup(&slot);
    if (!r) {
        submit_event(e);
        return;
    }
    if (r->ev.h.count) {
        submit_event(&r->ev);
        r->ev.h.count = 0;
    }
    if (full) {
        __builtin_memcpy(&r->ev, e, sizeof(*e));
        r->unit = e->io.size;
        return;
    }
    submit_event(e);
}

static __always_inline int io_exit(struct inflight *f, u32 tid, s64 ret)
{
    u64 latency = bpf_ktime_get_ns() - f->ts_ns;
    struct rt_event e = {};
    if (f->kind <= RT_PREADV && extend_run(f, tid, ret, latency)) {
        f->tid = 0;
        return 0;
    }
    e.h.ts_ns = f->ts_ns;
    e.h.pid = current_tgid();
    e.h.tid = tid;
    e.h.kind = f->kind;
    e.h.count = 1;
    e.io.latency_ns = latency;
    e.io.fd = f->fd;
    e.io.file = f->ofd;
    e.io.dev = f->dev;
    e.io.ino = f->ino;
    e.io.offset = f->offset;
    e.io.size = f->size;
    e.io.arg = f->arg;
    e.io.ret = ret;
    f->tid = 0;
    if (e.h.kind <= RT_PREADV) {
        emit_read(&e);
        return 0;
    }
    if (e.h.kind == RT_CLOSE || e.h.kind == RT_DUP)
        fd_table_changed();                   /* again at exit: a lookup during the call saw the old table */
    if (e.h.kind == RT_DUP) {                 /* fd = the new fd, arg = the old one */
        e.io.arg = e.io.fd;
        e.io.fd = ret;
    } else if (e.h.kind == RT_MMAP) {
        if (ret < 0 && ret > -4096)
            e.io.arg = 0;
        else {
            struct map_key k = {.tgid = e.h.pid, .addr = ret};
            struct map_val v = {.ofd = e.io.file, .ino = e.io.ino, .dev = e.io.dev};
            e.io.arg = ret;
            mmaps.update(&k, &v);
        }
    } else if (e.h.kind == RT_MUNMAP && ret == 0) {
        struct map_key k = {.tgid = e.h.pid, .addr = e.io.arg};
        mmaps.delete(&k);
    }
    submit_event(&e);
    return 0;
}

static __always_inline int munmap_enter(u64 addr, u64 len)
{
    struct map_key k = {};
    struct map_val *v;
    struct inflight *f;
    k.tgid = current_tgid();
    k.addr = addr;
    v = mmaps.lookup(&k);
    if (!v)
        return 0;                             /* not a file mapping we saw */
    f = inflight_begin(RT_MUNMAP);
    if (!f)
        return 0;
    f->fd = -1;
    f->ofd = v->ofd;
    f->ino = v->ino;
    f->dev = v->dev;
    f->offset = -1;
    f->size = len;
    f->arg = addr;
    return 0;
}

/* An fd of the current process is about to be closed or replaced (close, close_range, dup2/dup3): its
 * cached file is stale, and the thread's run is flushed, since the struct file may be freed and reused
 * by the next open (a read of that file at the run's end offset would extend the old file's run). */
static __always_inline void fd_closing(void)
{
    fd_table_changed();
    flush_run(current_tid());
}

static __always_inline int close_enter(s32 fd)
{
    fd_closing();
    return io_enter_at(RT_CLOSE, fd, -1, -1, 0, 0);
}

/* open*: the path is read at sys_exit (the user string is still there), with the new file's identity. */
static __always_inline int open_enter(u64 filename, s64 flags)
{
    struct inflight *f = inflight_begin(RT_OPEN);
    if (!f)
        return 0;
    f->ptr = filename;
    f->arg = flags;
    return 0;
}

static __always_inline int open_exit(struct inflight *f, u32 tid, s64 ret)
{
    u64 inode = 0;
    struct rt_str_event *e;
    f->tid = 0;
    e = strs.ringbuf_reserve(sizeof(struct rt_str_event));
    if (!e) {
        count_lost(1);
        return 0;
    }
    e->h.ts_ns = f->ts_ns;
    e->h.pid = current_tgid();
    e->h.tid = tid;
    e->h.kind = RT_OPEN;
    e->h.count = 1;
    e->h.pad = 0;
    e->open.latency_ns = bpf_ktime_get_ns() - f->ts_ns;
    e->open.flags = f->arg;
    e->open.ret = ret;
    e->open.i_size = -1;
    e->open.file = 0;
    e->open.ino = 0;
    e->open.dev = 0;
    e->open.pad = 0;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    if (bpf_probe_read_user_str(&e->path, sizeof(e->path), (void *)f->ptr) < 0)
        e->path[0] = 0;
    if (ret >= 0) {
        e->open.file = fd_to_file(ret);
        file_dev_ino(e->open.file, &e->open.dev, &e->open.ino);
        inode = e->open.file ? read_ptr(e->open.file + FILE_F_INODE) : 0;
        if (inode)
            bpf_probe_read_kernel(&e->open.i_size, sizeof(e->open.i_size), (void *)(inode + INODE_I_SIZE));
    }
    strs.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}

#endif
