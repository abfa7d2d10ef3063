/* readtrace probes: event records shared by the BPF programs and the Python decoder.
 *
 * Two ring buffers:
 *   events (fast, fixed 96-byte struct rt_event): reads, mmaps, page-cache and FUSE records;
 *           read in bulk by readtrace/record/ring.py straight from the mmapped ring.
 *   strs   (struct rt_str_event, with a path): open, fork, thread, exec; a few per file.
 * The Python side parses the RT_* numbers below from this file, so they live in one place.
 */

typedef int rwf_t;                 /* preadv2 tracepoint field type, not in bcc's default headers */

#define RT_EVENT_SIZE 96
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

/* Field use per view:
 *   app:   ofd = struct file *, dev/ino of its inode, offset/size = requested, ret = returned,
 *          latency_ns, arg = op-specific (dup: old fd, lseek: whence, fadvise: advice, mmap: address,
 *          exit: exit code), count = calls merged into this row (consecutive same-size reads).
 *   pages: dev/ino, offset/size in pages, count = tracepoint hits merged.
 *   fuse:  dev = connection, arg = unique, fd = opcode; send: size = request len;
 *          end: size = reply len, ret = error; daemon read: pid/tid = requesting task, aux = daemon
 *          tid, ofd = nodeid, ret = fh, offset/size = fuse_read_in offset/size.
 */
struct rt_event {
    u64 ts_ns;
    u64 ofd;
    u64 ino;
    s64 offset;
    s64 size;
    s64 ret;
    u64 latency_ns;
    s64 arg;
    u32 pid;
    u32 tid;
    s32 fd;
    u32 dev;
    u32 count;
    u32 aux;
    u16 kind;
    u16 pad16;
    u32 pad32;
};

/* open: path, flags in arg, fd = returned fd (ret), ofd/dev/ino/size (i_size) of the new file.
 * fork/thread: arg = new pid/tid, comm = its comm.  exec: path = filename, comm = new comm. */
struct rt_str_event {
    u64 ts_ns;
    u64 ofd;
    u64 ino;
    s64 size;
    s64 ret;
    s64 arg;
    u64 latency_ns;
    u32 pid;
    u32 tid;
    s32 fd;
    u32 dev;
    u32 kind;
    u32 pad32;
    char comm[16];
    char path[RT_PATH_MAX];
};

_Static_assert(sizeof(struct rt_event) == RT_EVENT_SIZE, "rt_event layout");
_Static_assert(sizeof(struct rt_str_event) == RT_STR_EVENT_SIZE, "rt_str_event layout");
