/* Maps and helpers shared by every probe. UPPERCASE tokens are substituted by the loader
 * (readtrace/record/program.py): kernel struct offsets from BTF, ring sizes, switches. */

BPF_RINGBUF_OUTPUT(events, EVENTS_RING_PAGES);
BPF_RINGBUF_OUTPUT(strs, STRS_RING_PAGES);
BPF_PERCPU_ARRAY(lost, u64, 2);               /* [0] events ring full, [1] strs ring or a map full */

BPF_HASH(tgids, u32, u8, 16384);              /* traced processes */
BPF_HASH(tids, u32, u32, 65536);              /* traced threads -> their process (kept after exit) */

struct inflight {                             /* a syscall between sys_enter and sys_exit */
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
BPF_HASH(inflight, u32, struct inflight, 16384);

static __always_inline void count_lost(int which)
{
    u64 *n = lost.lookup(&which);
    if (n)
        *n += 1;
}

static __always_inline u32 current_tgid(void) { return bpf_get_current_pid_tgid() >> 32; }
static __always_inline u32 current_tid(void) { return (u32)bpf_get_current_pid_tgid(); }

/* First test of every handler: is the current process part of the traced tree? */
static __always_inline int traced(void)
{
    u32 tgid = current_tgid();
    return tgids.lookup(&tgid) != 0;
}

static __always_inline u64 read_ptr(u64 addr)
{
    u64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (void *)addr);
    return v;
}

/* struct file * of fd in the current task: task->files->fdt->fd[fd]. */
static __always_inline u64 fd_to_file(s32 fd)
{
    u64 files, fdt, arr;
    u32 max_fds = 0;
    if (fd < 0)
        return 0;
    files = read_ptr(bpf_get_current_task() + TASK_FILES);
    if (!files)
        return 0;
    fdt = read_ptr(files + FILES_FDT);
    if (!fdt)
        return 0;
    bpf_probe_read_kernel(&max_fds, sizeof(max_fds), (void *)(fdt + FDTABLE_MAX_FDS));
    if ((u32)fd >= max_fds)
        return 0;
    arr = read_ptr(fdt + FDTABLE_FD);
    if (!arr)
        return 0;
    return read_ptr(arr + (u64)fd * 8);
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
