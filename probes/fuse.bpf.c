/* FUSE view. fuse_request_send/end are filtered by connection (background requests such as
 * readahead are flushed from other tasks' context, so the tgid filter would lose them); the daemon's
 * read(2) of /dev/fuse is decoded at raw sys_exit (fuse_in_header + fuse_read_in), kept only when the
 * requesting thread is traced. The loader fills fuse_conns (the mounts' connections) and daemons
 * (the processes holding /dev/fuse). (connection, unique) joins the three records. */

#ifndef READTRACE_FUSE_BPF_C
#define READTRACE_FUSE_BPF_C

#include <uapi/linux/fuse.h>            /* enum fuse_opcode, used by the tracepoint fields */
#include "common.bpf.c"

BPF_HASH(fuse_conns, u32, u8, 256);
BPF_ARRAY(daemons, u8, PID_LIMIT);            /* checked on every syscall exit: an array lookup */

struct fuse_in_header_ {
    u32 len;
    u32 opcode;
    u64 unique;
    u64 nodeid;
    u32 uid;
    u32 gid;
    u32 pid;
    u16 total_extlen;
    u16 padding;
};

struct fuse_read_in_ {
    u64 fh;
    u64 offset;
    u32 size;
    u32 read_flags;
};

static __always_inline int fuse_request(u16 kind, u32 conn, u64 unique, s32 opcode, s64 len, s32 err)
{
    struct rt_event e = {};
    if (!fuse_conns.lookup(&conn))
        return 0;
    head_now(&e.h, kind);
    e.fuse.connection = conn;
    e.fuse.unique = unique;
    e.fuse.opcode = opcode;
    e.fuse.len = len;
    e.fuse.error = err;
    submit_event(&e);
    return 0;
}

TRACEPOINT_PROBE(fuse, fuse_request_send)
{
    return fuse_request(RT_FUSE_SEND, args->connection, args->unique, args->opcode, args->len, 0);
}

TRACEPOINT_PROBE(fuse, fuse_request_end)
{
    return fuse_request(RT_FUSE_END, args->connection, args->unique, -1, args->len, args->error);
}

/* Connection of a /dev/fuse file: file->private_data (struct fuse_dev) ->fc ->dev. 0 if not /dev/fuse. */
static __always_inline u32 fuse_dev_connection(u64 file)
{
    u64 inode, fud, fc;
    u32 rdev = 0, conn = 0;
    if (!file)
        return 0;
    inode = read_ptr(file + FILE_F_INODE);
    bpf_probe_read_kernel(&rdev, sizeof(rdev), (void *)(inode + INODE_I_RDEV));
    if (rdev != DEV_FUSE_RDEV)
        return 0;
    fud = read_ptr(file + FILE_PRIVATE_DATA);
    fc = fud ? read_ptr(fud + FUSE_DEV_FC) : 0;
    if (fc)
        bpf_probe_read_kernel(&conn, sizeof(conn), (void *)(fc + FUSE_CONN_DEV));
    return conn;
}

/* Called from the raw sys_exit handler (syscalls.bpf.c) for untraced tasks. */
static __always_inline int fuse_daemon_read(struct bpf_raw_tracepoint_args *ctx)
{
    u32 tgid = current_tgid();
    u64 regs, nr, buf;
    s64 ret;
    s32 fd;
    u32 conn;
    u32 *req_tgid;
    u8 *is_daemon;
    struct fuse_in_header_ h = {};
    struct fuse_read_in_ r = {};
    struct rt_event e = {};
    is_daemon = daemons.lookup(&tgid);
    if (!is_daemon || !*is_daemon)
        return 0;
    regs = ctx->args[0];
    ret = ctx->args[1];
    nr = read_ptr(regs + PT_REGS_ORIG_AX);
    if (nr != SYS_READ_NR || ret < (s64)sizeof(h))
        return 0;
    fd = (s32)read_ptr(regs + PT_REGS_DI);
    buf = read_ptr(regs + PT_REGS_SI);
    conn = fuse_dev_connection(fd_to_file(fd));
    if (!conn || !fuse_conns.lookup(&conn))
        return 0;
    if (bpf_probe_read_user(&h, sizeof(h), (void *)buf))
        return 0;
    req_tgid = tids.lookup(&h.pid);
    if (!req_tgid || !*req_tgid)
        return 0;                             /* a request from outside the traced tree */
    e.h.ts_ns = bpf_ktime_get_ns();
    e.h.pid = *req_tgid;
    e.h.tid = h.pid;
    e.h.kind = RT_FUSE_DAEMON_READ;
    e.h.count = 1;
    e.daemon.daemon_tid = current_tid();
    e.daemon.connection = conn;
    e.daemon.unique = h.unique;
    e.daemon.opcode = h.opcode;
    e.daemon.nodeid = h.nodeid;
    if (h.opcode == FUSE_READ_OPCODE && ret >= (s64)(sizeof(h) + sizeof(r))
        && bpf_probe_read_user(&r, sizeof(r), (void *)(buf + sizeof(h))) == 0) {
        e.daemon.has_read_in = 1;
        e.daemon.fh = r.fh;
        e.daemon.offset = r.offset;
        e.daemon.size = r.size;
    }
    submit_event(&e);
    return 0;
}

#endif
