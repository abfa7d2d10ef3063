/* readtrace probes: event records shared by the BPF programs and the Python decoder.
 *
 * Two ring buffers:
 *   events (fast, fixed-size struct rt_event): reads, mmaps, page-cache and FUSE records;
 *           read in bulk by readtrace/record/ring.py straight from the mmapped ring.
 *   strs   (struct rt_str_event, with a path): open, fork, thread, exec; a few per file.
 * The Python side parses the RT_* numbers below from this file, so they live in one place.
 */

#ifndef READTRACE_H
#define READTRACE_H

typedef int rwf_t;                 /* preadv2 tracepoint field type, not in bcc's default headers */

#define RT_EVENT_SIZE 88
#define RT_STR_EVENT_SIZE 352
#define RT_PATH_MAX 256

enum rt_kind {
    /* application view (events ring) */
    RT_READ = 1, RT_PREAD = 2, RT_READV = 3, RT_PREADV = 4, RT_MMAP = 5, RT_MUNMAP = 6,
    RT_LSEEK = 7, RT_FADVISE = 8, RT_READAHEAD = 9, RT_CLOSE = 10, RT_DUP = 11, RT_EXIT = 12,
    RT_BLOCK = 13,                 /* a stretch off the CPU waiting on file I/O (sched.bpf.c) */
    /* page-cache view (events ring) */
    RT_FAULT = 20, RT_MAP_PAGES = 21, RT_GET_PAGES = 22, RT_MISS = 23, RT_SYNC_RA = 24, RT_ASYNC_RA = 25,
    /* FUSE view (events ring) */
    RT_FUSE_SEND = 30, RT_FUSE_END = 31, RT_FUSE_DAEMON_READ = 32,
    /* strs ring */
    RT_OPEN = 40, RT_FORK = 41, RT_THREAD = 42, RT_EXEC = 43,
};

/* Every record is a head (struct rt_head) and one member of a union named after its kind (libbpf-tools
 * filetop.h style), so each field means one thing. readtrace/record/records.py mirrors these structs as
 * numpy dtypes; program.py checks every member offset it relies on with _Static_assert at compile time. */
struct rt_head {
    u64 ts_ns;                /* bpf_ktime_get_ns() (the syscall's entry for syscalls) */
    u32 pid;                  /* process (tgid); FUSE: of the requesting thread */
    u32 tid;                  /* thread; FUSE: the requesting thread (fuse_in_header.pid) */
    u32 count;                /* hits merged into this record (consecutive reads, page runs); 1 otherwise */
    u16 kind;                 /* enum rt_kind: which union member follows */
    u16 pad;
};

/* RT_READ .. RT_DUP: a syscall on an open file (the syscall's own numbers). */
struct rt_io {
    u64 file;                 /* struct file * of the fd (the open file description); 0 unknown */
    u64 ino;                  /* its inode; 0 for reads (the decoder names them from the open) */
    s64 offset;               /* bytes; -1 not applicable */
    s64 size;                 /* requested bytes (a merged run: the total) */
    s64 ret;                  /* the syscall's return value (a merged run: the total) */
    u64 latency_ns;           /* entry to exit (a merged run: summed) */
    s64 arg;                  /* the op's own argument: lseek whence, fadvise advice, dup: the old fd,
                                 mmap/munmap: the mapping's address */
    s32 fd;                   /* dup: the new fd */
    u32 dev;                  /* dev of the inode (kernel encoding major << 20 | minor) */
};

/* RT_EXIT: a thread exited (sched_process_exit). */
struct rt_exit {
    s64 wait_status;          /* task->exit_code, a wait(2) status */
    u32 group_dead;           /* the last thread of its process */
    u32 pad;
};

/* RT_BLOCK: a stretch a traced thread spent off the CPU waiting on file I/O (sched.bpf.c); the head's
 * ts_ns is when it left the CPU. */
struct rt_wait {
    u64 file;                 /* struct file * of the read it waited in, else 0 */
    u64 ino;                  /* the file (read or faulting mapping); 0 unknown */
    u64 latency_ns;           /* how long it stayed off the CPU */
    u32 dev;
    u16 in_kind;              /* what it waited in: an RT_* syscall kind, RT_FAULT, or RT_BLOCK elsewhere */
    u16 pad;
};

/* RT_FAULT .. RT_ASYNC_RA: a range of one file's page-cache pages. */
struct rt_pages {
    u64 mapping;              /* struct address_space * when known (a run extends on it), else 0 */
    u64 ino;
    u64 first;                /* page index */
    u64 npages;
    u32 dev;
    u32 pad;
};

/* RT_FUSE_SEND / RT_FUSE_END: the fuse_request_send / fuse_request_end tracepoints. */
struct rt_fuse_request {
    u64 unique;
    s64 len;                  /* send: request length; end: reply length */
    s32 error;                /* end: the reply's error (0: ok) */
    u32 connection;
    s32 opcode;               /* send: enum fuse_opcode; end: -1 */
    u32 pad;
};

/* RT_FUSE_DAEMON_READ: the daemon read a request from /dev/fuse (fuse_in_header [+ fuse_read_in]). */
struct rt_fuse_daemon {
    u64 unique;
    u64 nodeid;               /* the daemon's node handle: NOT the inode number */
    u64 fh;                   /* fuse_read_in.fh (has_read_in) */
    u64 offset;               /* fuse_read_in.offset (has_read_in) */
    u32 size;                 /* fuse_read_in.size (has_read_in) */
    u32 connection;
    u32 opcode;
    u32 daemon_tid;           /* the daemon thread that read it */
    u32 has_read_in;          /* a READ whose fuse_read_in was copied */
    u32 pad;
};

struct rt_event {
    struct rt_head h;
    union {
        struct rt_io io;
        struct rt_exit exit;
        struct rt_wait wait;
        struct rt_pages pages;
        struct rt_fuse_request fuse;
        struct rt_fuse_daemon daemon;
    };
};

/* RT_OPEN: openat/open/openat2 returned (the path is the caller's argument). */
struct rt_open {
    u64 file;                 /* struct file * of the new fd (0 when the open failed) */
    u64 ino;
    s64 i_size;               /* the file's size at open; -1 unknown */
    s64 ret;                  /* the new fd, or -errno */
    s64 flags;                /* open flags */
    u64 latency_ns;
    u32 dev;
    u32 pad;
};

/* RT_FORK / RT_THREAD: the new process or thread; RT_EXEC: the pid that exec'd. */
struct rt_task {
    u32 id;
    u32 inner_id;             /* fork/thread: the new task's id in its innermost PID namespace (a
                                 container's own; equal to id in the host's); 0 unknown */
};

struct rt_str_event {
    struct rt_head h;
    union {
        struct rt_open open;
        struct rt_task task;
    };
    char comm[16];            /* fork/thread: the new task's comm; exec: the new comm */
    char path[RT_PATH_MAX];   /* open: the path argument; exec: the filename */
};

_Static_assert(sizeof(struct rt_event) == RT_EVENT_SIZE, "rt_event layout");
_Static_assert(sizeof(struct rt_str_event) == RT_STR_EVENT_SIZE, "rt_str_event layout");

#endif
