/* Process tree: follow every task the command creates; flush per-thread runs when a thread exits. */

#ifndef READTRACE_PROC_BPF_C
#define READTRACE_PROC_BPF_C

#include "common.bpf.c"
#include "app.bpf.c"                  /* flush_run */
#include "pages.bpf.c"                /* flush_page_runs */

/* A task's id in its innermost PID namespace: task->thread_pid->numbers[thread_pid->level].nr (a
 * container's own pid; the host's for a task of the host's namespace). 0 when it cannot be read. */
static __always_inline u32 inner_id(u64 task)
{
    u64 pid = read_ptr(task + TASK_THREAD_PID);
    u32 level = 0;
    s32 nr = 0;
    if (!pid)
        return 0;
    bpf_probe_read_kernel(&level, sizeof(level), (void *)(pid + PID_LEVEL));
    bpf_probe_read_kernel(&nr, sizeof(nr), (void *)(pid + PID_NUMBERS + (u64)(level & 31) * 16));
    return nr;
}

static __always_inline void submit_task_event(u16 kind, u32 new_id, u32 new_inner_id, char *comm, u64 path)
{
    struct rt_str_event *e = strs.ringbuf_reserve(sizeof(struct rt_str_event));
    if (!e) {
        count_lost(1);
        return;
    }
    __builtin_memset(e, 0, sizeof(*e));
    head_now(&e->h, kind);
    e->task.id = new_id;
    e->task.inner_id = new_inner_id;
    if (comm)
        bpf_probe_read_kernel_str(&e->comm, sizeof(e->comm), comm);
    else
        bpf_get_current_comm(&e->comm, sizeof(e->comm));
    if (path)
        bpf_probe_read_kernel_str(&e->path, sizeof(e->path), (void *)path);
    strs.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* Runs before the new task can run, so nothing it does is missed. Raw: the new task itself is at hand
 * (its id in a container's PID namespace). task_newtask(struct task_struct *task, u64 clone_flags). */
RAW_TRACEPOINT_PROBE(task_newtask)
{
    u64 task = ctx->args[0];
    u32 tgid = current_tgid();
    u32 child = 0;
    u8 one = 1;
    int thread = (ctx->args[1] & CLONE_THREAD_FLAG) != 0;
    u32 child_tgid;
    if (!traced()) return 0;
    bpf_probe_read_kernel(&child, sizeof(child), (void *)(task + TASK_PID));
    child_tgid = thread ? tgid : child;
    if (!thread && tgids.update(&child_tgid, &one))
        count_lost(1);                        /* pid beyond PID_LIMIT: cannot happen on Linux */
    if (!thread)
        fd_table_of_changed(child_tgid);      /* a reused pid: entries of the old process are stale */
    if (tids.update(&child, &child_tgid))
        count_lost(1);
    submit_task_event(thread ? RT_THREAD : RT_FORK, child, inner_id(task), (char *)(task + TASK_COMM), 0);
    return 0;
}

#if WITH_CGROUP
/* record --cgroup: a process moved into the recorded cgroup v2 directory or one below it (cgroup.procs
 * written: a container's first process, a systemd unit's main process) is traced from then on. The
 * tracepoint fires once per move, with the group leader, after the move succeeded. The directory is
 * found among the destination's ancestors (struct cgroup's ancestors[level], itself included) by its
 * id, its inode number, on the v2 hierarchy (hierarchy id 0: a v1 hierarchy numbers its cgroups on its
 * own). Its depth is not needed: a cgroup namespace shows another root than the host's. */
RAW_TRACEPOINT_PROBE(cgroup_attach_task)
{
    u64 cgrp = ctx->args[0];
    u64 task = ctx->args[2];
    u64 root, anc, kn, id;
    s32 level = -1, hierarchy = -1;
    u32 tgid = 0, pid = 0;
    u8 one = 1;
    int found = 0;
    root = read_ptr(cgrp + CGROUP_ROOT);
    bpf_probe_read_kernel(&hierarchy, sizeof(hierarchy), (void *)(root + CGROUP_ROOT_HIERARCHY_ID));
    if (hierarchy != 0)
        return 0;
    bpf_probe_read_kernel(&level, sizeof(level), (void *)(cgrp + CGROUP_LEVEL));
    for (int i = 0; i < CGROUP_MAX_DEPTH; i++) {    /* a bounded loop: the verifier takes it as it is */
        if (i > level)
            break;
        anc = read_ptr(cgrp + CGROUP_ANCESTORS + i * 8);
        kn = anc ? read_ptr(anc + CGROUP_KN) : 0;
        id = 0;
        if (kn)
            bpf_probe_read_kernel(&id, sizeof(id), (void *)(kn + KERNFS_NODE_ID));
        if (id == CGROUP_WANTED_ID) {
            found = 1;
            break;
        }
    }
    if (!found)
        return 0;
    bpf_probe_read_kernel(&tgid, sizeof(tgid), (void *)(task + TASK_TGID));
    bpf_probe_read_kernel(&pid, sizeof(pid), (void *)(task + TASK_PID));
    if (!tgid || tgids.update(&tgid, &one))
        return 0;
    fd_table_of_changed(tgid);
    tids.update(&pid, &tgid);
    submit_task_event(RT_FORK, tgid, inner_id(task), (char *)(task + TASK_COMM), 0);  /* threads: the recorder adds them */
    return 0;
}
#endif

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    if (!traced()) return 0;
    fd_table_changed();                       /* close-on-exec fds are gone */
    submit_task_event(RT_EXEC, args->pid, 0, 0, (u64)args + (args->data_loc_filename & 0xFFFF));
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u32 tgid = current_tgid();
    u32 tid = current_tid();
    s32 code = 0;
    struct rt_event e = {};
    struct inflight *f;
    if (!traced()) return 0;
    exit_now(tid, bpf_ktime_get_ns());
    flush_run(tid);
    flush_page_runs(tid);
    f = inflight_mine(tid);
    if (f)
        f->tid = 0;                           /* killed inside a syscall: free the slot */
    bpf_probe_read_kernel(&code, sizeof(code), (void *)(bpf_get_current_task() + TASK_EXIT_CODE));
    head_now(&e.h, RT_EXIT);
    e.exit.wait_status = code;
    e.exit.group_dead = args->group_dead;
    submit_event(&e);
    if (args->group_dead) {
        u8 off = 0;
        tgids.update(&tgid, &off);            /* the pid may be reused by an unrelated process */
    }
    return 0;
}

#endif
