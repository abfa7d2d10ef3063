/* Syscall dispatch: one raw sys_enter and one raw sys_exit handler instead of a syscalls:* tracepoint
 * pair per call. A raw tracepoint skips the perf trace-buffer copy (~200 ns per hit), and enabling any
 * syscall tracepoint already routes every task's syscalls through this hook, so the only extra cost
 * for untraced tasks is the tgid array lookup. Arguments come from pt_regs (x86_64 ABI: di, si, dx,
 * r10, r8, r9), read in one 64-byte copy from r10 up to di. */

#ifndef READTRACE_SYSCALLS_BPF_C
#define READTRACE_SYSCALLS_BPF_C

#include "common.bpf.c"
#include "app.bpf.c"                  /* io_enter_at, io_exit, open_enter/exit, munmap_enter, close_enter */
#include "sched.bpf.c"                /* fault_end */
#if WITH_FUSE
#include "fuse.bpf.c"                 /* fuse_daemon_read */
#endif

struct syscall_regs {                         /* pt_regs from r10 to di (offsets checked in Python) */
    u64 slot[8];
};

#define ARG1 (r.slot[SYSARG1_SLOT])
#define ARG2 (r.slot[SYSARG2_SLOT])
#define ARG3 (r.slot[SYSARG3_SLOT])
#define ARG4 (r.slot[SYSARG4_SLOT])
#define ARG5 (r.slot[SYSARG5_SLOT])
#define ARG6 (r.slot[SYSARG6_SLOT])

static __always_inline int wanted_syscall(u64 id)
{
    switch (id) {
    case NR_READ: case NR_PREAD64: case NR_READV: case NR_PREADV: case NR_PREADV2:
    case NR_MMAP: case NR_MUNMAP: case NR_LSEEK: case NR_FADVISE64: case NR_READAHEAD:
    case NR_CLOSE: case NR_DUP: case NR_DUP2: case NR_DUP3: case NR_FCNTL: case NR_CLOSE_RANGE:
    case NR_OPEN: case NR_OPENAT: case NR_OPENAT2:
        return 1;
    }
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_enter)
{
    struct syscall_regs r = {};
    u64 id;
    u64 how_flags = 0;
    if (!traced()) return 0;
    fault_end(current_tid());                 /* a syscall: any file fault of this thread is over */
    id = ctx->args[1];
    if (!wanted_syscall(id))
        return 0;
    bpf_probe_read_kernel(&r, sizeof(r), (void *)(ctx->args[0] + PT_REGS_R10));
    switch (id) {
    case NR_READ:
        return io_enter_at(RT_READ, ARG1, -1, ARG3, 0, 1);
    case NR_PREAD64:
        return io_enter_at(RT_PREAD, ARG1, ARG4, ARG3, 0, 0);
    case NR_READV:
        return io_enter_at(RT_READV, ARG1, -1, iov_bytes(ARG2, ARG3), 0, 1);
    case NR_PREADV:
        return io_enter_at(RT_PREADV, ARG1, ARG4, iov_bytes(ARG2, ARG3), 0, 0);
    case NR_PREADV2:                          /* offset -1: the file position, like readv */
        return io_enter_at(RT_PREADV, ARG1, ARG4, iov_bytes(ARG2, ARG3), 0, (s64)ARG4 == -1);
    case NR_MMAP:
        if ((s32)ARG5 < 0 || (ARG4 & MAP_ANONYMOUS_FLAG))
            return 0;                         /* anonymous memory: not file I/O */
        return io_enter_at(RT_MMAP, ARG5, ARG6, ARG2, 0, 0);
    case NR_MUNMAP:
        return munmap_enter(ARG1, ARG2);
    case NR_LSEEK:
        return io_enter_at(RT_LSEEK, ARG1, ARG2, -1, ARG3, 0);
    case NR_FADVISE64:
        return io_enter_at(RT_FADVISE, ARG1, ARG2, ARG3, ARG4, 0);
    case NR_READAHEAD:
        return io_enter_at(RT_READAHEAD, ARG1, ARG2, ARG3, 0, 0);
    case NR_CLOSE:
        return close_enter(ARG1);
    case NR_CLOSE_RANGE:                      /* not recorded itself */
        fd_closing();
        return 0;
    case NR_DUP2: case NR_DUP3:               /* may replace the new fd's file */
        fd_closing();
        return io_enter_at(RT_DUP, ARG1, -1, -1, 0, 0);
    case NR_DUP:
        return io_enter_at(RT_DUP, ARG1, -1, -1, 0, 0);
    case NR_FCNTL:
        if (ARG2 != F_DUPFD_CMD && ARG2 != F_DUPFD_CLOEXEC_CMD)
            return 0;
        return io_enter_at(RT_DUP, ARG1, -1, -1, 0, 0);
    case NR_OPEN:
        return open_enter(ARG1, ARG2);
    case NR_OPENAT:
        return open_enter(ARG2, ARG3);
    case NR_OPENAT2:
        bpf_probe_read_user(&how_flags, sizeof(how_flags), (void *)ARG3);  /* open_how.flags */
        return open_enter(ARG2, how_flags);
    }
    return 0;
}

RAW_TRACEPOINT_PROBE(sys_exit)
{
    u32 tid;
    struct inflight *f;
    if (!traced()) {
#if WITH_FUSE
        return fuse_daemon_read(ctx);
#else
        return 0;
#endif
    }
    tid = current_tid();
    f = inflight_mine(tid);                   /* set only by the syscalls dispatched above */
    if (!f)
        return 0;
    if (f->kind == RT_OPEN)
        return open_exit(f, tid, ctx->args[1]);
    return io_exit(f, tid, ctx->args[1]);
}

#endif
