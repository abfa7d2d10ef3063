/* Where a traced thread's time goes (sched:sched_switch): on a CPU, waiting for one (preempted),
 * off it waiting on file I/O, or otherwise off it (sleeping, blocked elsewhere). Totals per thread
 * accumulate in sched_acct (read once at the end into the trace's meta["sched"]). Every off-CPU
 * stretch spent in a read syscall or a file page fault (or blocked in D state anywhere) is also one
 * RT_BLOCK record (struct rt_wait in readtrace.h): when it left the CPU, how long it stayed off, what it
 * waited in (an RT_* syscall kind, RT_FAULT, or RT_BLOCK = blocked elsewhere) and the file. FUSE READs wait in S state (request_wait_answer), page locks in D: the
 * context, not the state, says "file I/O".
 *
 * A file fault is in progress from mm_filemap_fault until the thread's next syscall (a fault returns
 * to user space, whose next kernel entry is a syscall or another fault): fault_at holds it. */

#ifndef READTRACE_SCHED_BPF_C
#define READTRACE_SCHED_BPF_C

#include "common.bpf.c"

#define SCHED_STATE_D 0x2                     /* TASK_UNINTERRUPTIBLE as sched_switch reports it */
#define SCHED_PREEMPTED 0x100                 /* TASK_REPORT_MAX: switched out while runnable */

struct sched_acct {
    u64 first_ns;                             /* first switch seen */
    u64 last_ns;                              /* latest switch seen */
    u64 cpu_ns;                               /* on a CPU */
    u64 runq_ns;                              /* runnable, waiting for a CPU */
    u64 off_ns;                               /* off the CPU, not runnable (includes the I/O waits) */
    u64 on_ts;                                /* switched in at (0: off) */
    u64 off_ts;                               /* switched out at (0: on) */
    u64 off_ofd;                              /* the file of the read it waits in */
    u64 off_ino;
    u32 off_dev;
    u16 off_what;                             /* RT_* kind it waits in, 0: not file I/O */
    u16 off_runnable;
};
BPF_HASH(sched_acct, u32, struct sched_acct, 65536);

struct fault_note {
    u32 tid;                                  /* owner; 0 = none */
    u32 pad;
    u64 mapping;                              /* struct address_space * of the faulting file */
};
BPF_ARRAY(fault_at, struct fault_note, SLOTS);

static __always_inline void fault_begin(u64 mapping)
{
    u32 tid = current_tid();
    u32 slot = slot_of(tid);
    struct fault_note *n = fault_at.lookup(&slot);
    if (n) {
        n->tid = tid;
        n->mapping = mapping;
    }
}

static __always_inline void fault_end(u32 tid)
{
    u32 slot = slot_of(tid);
    struct fault_note *n = fault_at.lookup(&slot);
    if (n && n->tid == tid)
        n->tid = 0;
}

/* What the current (traced) thread leaves the CPU waiting in. */
static __always_inline void note_wait(struct sched_acct *a, u32 tid, long state)
{
    u32 slot = slot_of(tid);
    struct inflight *f = inflight_mine(tid);
    struct fault_note *n = fault_at.lookup(&slot);
    a->off_what = 0;
    a->off_ofd = 0;
    a->off_ino = 0;
    a->off_dev = 0;
    if (f && f->kind != RT_OPEN) {
        a->off_what = f->kind;
        a->off_ofd = f->ofd;
        file_dev_ino(f->ofd, &a->off_dev, &a->off_ino);  /* the file itself: a struct file * is reused */
    } else if (f) {
        a->off_what = RT_OPEN;
    } else if (n && n->tid == tid) {
        u64 host = read_ptr(n->mapping + ADDRESS_SPACE_HOST), sb;
        a->off_what = RT_FAULT;
        if (host) {
            bpf_probe_read_kernel(&a->off_ino, sizeof(a->off_ino), (void *)(host + INODE_I_INO));
            sb = read_ptr(host + INODE_I_SB);
            if (sb)
                bpf_probe_read_kernel(&a->off_dev, sizeof(a->off_dev), (void *)(sb + SUPER_BLOCK_S_DEV));
        }
    } else if (!(state & SCHED_STATE_D)) {
        return;                               /* sleeping outside file I/O: only the total counts */
    }
    if (!a->off_what)
        a->off_what = RT_BLOCK;               /* D state outside the calls we follow */
}

static __always_inline void switch_out(u32 tid, long state, u64 now)
{
    struct sched_acct zero = {}, *a;
    a = sched_acct.lookup_or_try_init(&tid, &zero);
    if (!a)
        return;
    if (!a->first_ns)
        a->first_ns = now;
    if (a->on_ts)
        a->cpu_ns += now - a->on_ts;
    a->on_ts = 0;
    a->off_ts = now;
    a->last_ns = now;
    a->off_runnable = state == 0 || (state & SCHED_PREEMPTED);
    a->off_what = 0;
    if (!a->off_runnable)
        note_wait(a, tid, state);
}

static __always_inline void switch_in(u32 tid, u32 tgid, u64 now)
{
    struct sched_acct zero = {}, *a;
    struct rt_event e = {};
    a = sched_acct.lookup_or_try_init(&tid, &zero);
    if (!a)
        return;
    if (!a->first_ns)
        a->first_ns = now;
    a->last_ns = now;
    a->on_ts = now;
    if (!a->off_ts)
        return;
    if (a->off_runnable)
        a->runq_ns += now - a->off_ts;
    else
        a->off_ns += now - a->off_ts;
    if (a->off_what) {
        e.h.ts_ns = a->off_ts;
        e.h.pid = tgid;
        e.h.tid = tid;
        e.h.kind = RT_BLOCK;
        e.h.count = 1;
        e.wait.latency_ns = now - a->off_ts;
        e.wait.file = a->off_ofd;
        e.wait.dev = a->off_dev;
        e.wait.ino = a->off_ino;
        e.wait.in_kind = a->off_what;
        submit_event(&e);
    }
    a->off_ts = 0;
    a->off_what = 0;
}

/* A thread exiting: its on-CPU stretch up to now. The exit of a process's last thread untraces its
 * tgid before the thread's final sched_switch, which then counts nothing: a worker that computed
 * until it exited lost that stretch (a forked worker burning 0.5 s of CPU last: 0.36-0.45 s counted). */
static __always_inline void exit_now(u32 tid, u64 now)
{
    struct sched_acct *a = sched_acct.lookup(&tid);
    if (!a || !a->on_ts)
        return;
    a->cpu_ns += now - a->on_ts;
    a->on_ts = now;                           /* a switch still seen counts from here */
    a->last_ns = now;
}

TRACEPOINT_PROBE(sched, sched_switch)
{
    u64 now = 0;
    u32 prev = args->prev_pid, next = args->next_pid;
    u32 *next_tgid = tids.lookup(&next);
    u8 *on = 0;
    if (next_tgid && *next_tgid)
        on = tgids.lookup(next_tgid);
    if (traced()) {
        now = bpf_ktime_get_ns();
        switch_out(prev, args->prev_state, now);
    }
    if (on && *on && next) {
        if (!now)
            now = bpf_ktime_get_ns();
        switch_in(next, *next_tgid, now);
    }
    return 0;
}

#endif
