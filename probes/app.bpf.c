/* Application view: the syscalls of the traced tree. Each sys_enter stores a struct inflight keyed
 * by thread; the matching sys_exit completes it into one rt_event. Consecutive full reads of the same
 * size by one thread on one open file description are merged in kernel (count = calls merged) so a
 * 4 KiB read storm costs one record per run, with exact call and byte counts. */

struct run {
    struct rt_event ev;
    s64 unit;                                 /* requested size of every call in the run */
};
BPF_HASH(runs, u32, struct run, 16384);

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

static __always_inline int io_enter_at(u16 kind, s32 fd, s64 offset, s64 size, s64 arg, int use_pos)
{
    u32 tid = current_tid();
    struct inflight f = {};
    f.ts_ns = bpf_ktime_get_ns();
    f.kind = kind;
    f.fd = fd;
    f.size = size;
    f.arg = arg;
    f.ofd = fd_to_file(fd);
    file_dev_ino(f.ofd, &f.dev, &f.ino);
    if (use_pos && f.ofd)                     /* read()/readv(): the offset is the file position */
        bpf_probe_read_kernel(&offset, sizeof(offset), (void *)(f.ofd + FILE_F_POS));
    f.offset = offset;
    if (inflight.update(&tid, &f))
        count_lost(1);
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

static __always_inline void flush_run(u32 tid)
{
    struct run *r = runs.lookup(&tid);
    if (!r)
        return;
    submit_event(&r->ev);
    runs.delete(&tid);
}

static __always_inline int extends(struct run *r, struct rt_event *e)
{
    return r->ev.kind == e->kind && r->ev.ofd == e->ofd && r->ev.ino == e->ino
        && r->ev.offset + r->ev.ret == e->offset && r->unit == e->size;
}

/* A completed read: extend this thread's run, or flush it and start a new one. */
static __always_inline void emit_read(struct rt_event *e)
{
    u32 tid = e->tid;
    int full = COALESCE && e->size > 0 && e->ret == e->size && e->ofd;
    struct run *r = runs.lookup(&tid);
    if (r) {
        if (full && extends(r, e)) {
            r->ev.count += 1;
            r->ev.size += e->size;
            r->ev.ret += e->ret;
            r->ev.latency_ns += e->latency_ns;
            return;
        }
        submit_event(&r->ev);
        runs.delete(&tid);
    }
    if (full) {
        struct run nr = {};
        __builtin_memcpy(&nr.ev, e, sizeof(*e));
        nr.unit = e->size;
        if (runs.update(&tid, &nr) == 0)
            return;
    }
    submit_event(e);
}

static __always_inline int io_exit(s64 ret)
{
    u32 tid = current_tid();
    struct rt_event e = {};
    struct inflight *f = inflight.lookup(&tid);
    if (!f)
        return 0;
    e.ts_ns = f->ts_ns;
    e.latency_ns = bpf_ktime_get_ns() - f->ts_ns;
    e.pid = current_tgid();
    e.tid = tid;
    e.kind = f->kind;
    e.fd = f->fd;
    e.ofd = f->ofd;
    e.dev = f->dev;
    e.ino = f->ino;
    e.offset = f->offset;
    e.size = f->size;
    e.arg = f->arg;
    e.ret = ret;
    e.count = 1;
    inflight.delete(&tid);
    if (e.kind <= RT_PREADV) {
        emit_read(&e);
        return 0;
    }
    if (e.kind == RT_DUP) {                   /* fd = the new fd, arg = the old one */
        e.arg = e.fd;
        e.fd = ret;
    } else if (e.kind == RT_MMAP) {
        if (ret < 0 && ret > -4096)
            e.arg = 0;
        else {
            struct map_key k = {.tgid = e.pid, .addr = ret};
            struct map_val v = {.ofd = e.ofd, .ino = e.ino, .dev = e.dev};
            e.arg = ret;
            mmaps.update(&k, &v);
        }
    } else if (e.kind == RT_MUNMAP && ret == 0) {
        struct map_key k = {.tgid = e.pid, .addr = e.arg};
        mmaps.delete(&k);
    }
    submit_event(&e);
    return 0;
}

#define EXIT_PROBE(name) \
    TRACEPOINT_PROBE(syscalls, sys_exit_##name) { if (!traced()) return 0; return io_exit(args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{
    if (!traced()) return 0;
    return io_enter_at(RT_READ, args->fd, -1, args->count, 0, 1);
}
EXIT_PROBE(read)

TRACEPOINT_PROBE(syscalls, sys_enter_pread64)
{
    if (!traced()) return 0;
    return io_enter_at(RT_PREAD, args->fd, args->pos, args->count, 0, 0);
}
EXIT_PROBE(pread64)

TRACEPOINT_PROBE(syscalls, sys_enter_readv)
{
    if (!traced()) return 0;
    return io_enter_at(RT_READV, args->fd, -1, iov_bytes((u64)args->vec, args->vlen), 0, 1);
}
EXIT_PROBE(readv)

TRACEPOINT_PROBE(syscalls, sys_enter_preadv)
{
    if (!traced()) return 0;
    return io_enter_at(RT_PREADV, args->fd, args->pos_l, iov_bytes((u64)args->vec, args->vlen), 0, 0);
}
EXIT_PROBE(preadv)

TRACEPOINT_PROBE(syscalls, sys_enter_preadv2)
{
    s64 pos = args->pos_l;
    if (!traced()) return 0;
    return io_enter_at(RT_PREADV, args->fd, pos, iov_bytes((u64)args->vec, args->vlen), 0, pos == -1);
}
EXIT_PROBE(preadv2)

TRACEPOINT_PROBE(syscalls, sys_enter_mmap)
{
    s32 fd = args->fd;
    if (!traced()) return 0;
    if (fd < 0 || (args->flags & MAP_ANONYMOUS_FLAG))
        return 0;                             /* anonymous memory: not file I/O */
    return io_enter_at(RT_MMAP, fd, args->off, args->len, 0, 0);
}
EXIT_PROBE(mmap)

TRACEPOINT_PROBE(syscalls, sys_enter_munmap)
{
    u32 tid;
    struct map_key k = {};
    struct map_val *v;
    struct inflight f = {};
    if (!traced()) return 0;
    k.tgid = current_tgid();
    k.addr = args->addr;
    v = mmaps.lookup(&k);
    if (!v)
        return 0;                             /* not a file mapping we saw */
    tid = current_tid();
    f.ts_ns = bpf_ktime_get_ns();
    f.kind = RT_MUNMAP;
    f.fd = -1;
    f.ofd = v->ofd;
    f.ino = v->ino;
    f.dev = v->dev;
    f.offset = -1;
    f.size = args->len;
    f.arg = args->addr;
    inflight.update(&tid, &f);
    return 0;
}
EXIT_PROBE(munmap)

TRACEPOINT_PROBE(syscalls, sys_enter_lseek)
{
    if (!traced()) return 0;
    return io_enter_at(RT_LSEEK, args->fd, args->offset, -1, args->whence, 0);
}
EXIT_PROBE(lseek)

TRACEPOINT_PROBE(syscalls, sys_enter_fadvise64)
{
    if (!traced()) return 0;
    return io_enter_at(RT_FADVISE, args->fd, args->offset, args->len, args->advice, 0);
}
EXIT_PROBE(fadvise64)

TRACEPOINT_PROBE(syscalls, sys_enter_readahead)
{
    if (!traced()) return 0;
    return io_enter_at(RT_READAHEAD, args->fd, args->offset, args->count, 0, 0);
}
EXIT_PROBE(readahead)

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    u32 tid;
    struct run *r;
    if (!traced()) return 0;
    io_enter_at(RT_CLOSE, args->fd, -1, -1, 0, 0);
    tid = current_tid();
    r = runs.lookup(&tid);
    if (r && r->ev.fd == (s32)args->fd)
        flush_run(tid);                       /* the file pointer may be reused once closed */
    return 0;
}
EXIT_PROBE(close)

TRACEPOINT_PROBE(syscalls, sys_enter_dup)
{
    if (!traced()) return 0;
    return io_enter_at(RT_DUP, args->fildes, -1, -1, 0, 0);
}
EXIT_PROBE(dup)

TRACEPOINT_PROBE(syscalls, sys_enter_dup2)
{
    if (!traced()) return 0;
    return io_enter_at(RT_DUP, args->oldfd, -1, -1, 0, 0);
}
EXIT_PROBE(dup2)

TRACEPOINT_PROBE(syscalls, sys_enter_dup3)
{
    if (!traced()) return 0;
    return io_enter_at(RT_DUP, args->oldfd, -1, -1, 0, 0);
}
EXIT_PROBE(dup3)

TRACEPOINT_PROBE(syscalls, sys_enter_fcntl)
{
    if (!traced()) return 0;
    if (args->cmd != F_DUPFD_CMD && args->cmd != F_DUPFD_CLOEXEC_CMD)
        return 0;
    return io_enter_at(RT_DUP, args->fd, -1, -1, 0, 0);
}
EXIT_PROBE(fcntl)

/* open*: the path is read at sys_exit (the user string is still there), with the new file's identity. */
static __always_inline int open_enter(u64 filename, s64 flags)
{
    u32 tid = current_tid();
    struct inflight f = {};
    f.ts_ns = bpf_ktime_get_ns();
    f.kind = RT_OPEN;
    f.ptr = filename;
    f.arg = flags;
    if (inflight.update(&tid, &f))
        count_lost(1);
    return 0;
}

static __always_inline int open_exit(s64 ret)
{
    u32 tid = current_tid();
    u64 inode = 0;
    struct inflight *f = inflight.lookup(&tid);
    struct rt_str_event *e;
    if (!f)
        return 0;
    e = strs.ringbuf_reserve(sizeof(struct rt_str_event));
    if (!e) {
        count_lost(1);
        inflight.delete(&tid);
        return 0;
    }
    e->ts_ns = f->ts_ns;
    e->latency_ns = bpf_ktime_get_ns() - f->ts_ns;
    e->pid = current_tgid();
    e->tid = tid;
    e->kind = RT_OPEN;
    e->arg = f->arg;
    e->ret = ret;
    e->fd = ret;
    e->size = -1;
    e->ofd = 0;
    e->ino = 0;
    e->dev = 0;
    e->pad32 = 0;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    if (bpf_probe_read_user_str(&e->path, sizeof(e->path), (void *)f->ptr) < 0)
        e->path[0] = 0;
    inflight.delete(&tid);
    if (ret >= 0) {
        e->ofd = fd_to_file(ret);
        file_dev_ino(e->ofd, &e->dev, &e->ino);
        inode = e->ofd ? read_ptr(e->ofd + FILE_F_INODE) : 0;
        if (inode)
            bpf_probe_read_kernel(&e->size, sizeof(e->size), (void *)(inode + INODE_I_SIZE));
    }
    strs.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
    if (!traced()) return 0;
    return open_enter((u64)args->filename, args->flags);
}
TRACEPOINT_PROBE(syscalls, sys_exit_openat) { if (!traced()) return 0; return open_exit(args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_open)
{
    if (!traced()) return 0;
    return open_enter((u64)args->filename, args->flags);
}
TRACEPOINT_PROBE(syscalls, sys_exit_open) { if (!traced()) return 0; return open_exit(args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_openat2)
{
    u64 flags = 0;
    if (!traced()) return 0;
    bpf_probe_read_user(&flags, sizeof(flags), (void *)args->how);
    return open_enter((u64)args->filename, flags);
}
TRACEPOINT_PROBE(syscalls, sys_exit_openat2) { if (!traced()) return 0; return open_exit(args->ret); }
