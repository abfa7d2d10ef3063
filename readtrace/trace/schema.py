"""Column schemas of the trace tables. One place: writer, reader and tests use these.

Conventions shared by every table:
- ``ts_ns``: CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns); ``meta["t0_ns"]`` is the recording start.
- ``pid`` is the process (tgid), ``tid`` the thread. The FUSE header's "pid" is a thread id.
- ``dev`` uses the kernel encoding ``major << 20 | minor`` (what tracepoints print), not st_dev.
- ``offset``/``size`` are bytes; -1 means "not applicable / unknown".
- ``ofd`` is the open file description id (kernel ``struct file *`` as int64), 0 when unknown.
- Ids the kernel or a FUSE daemon hands out are unsigned 64-bit and stored as such (``uint64``): the
  inode number ``ino`` (object-store clients such as rclone hash paths into all 64 bits), and in the
  FUSE table ``unique``, ``nodeid`` and ``fh``. 0 means unknown (no inode or node is numbered 0
  except where noted). A FUSE ``nodeid`` is the daemon's node handle, NOT the inode number: files
  are matched to nodeids by the analysis (analyze/views/nodes.py), never by ``nodeid == ino``.

Readers (``readtrace.trace.Trace``, from ``load_trace`` or ``make_trace``). On disk the application
view is one ``events`` table; in memory it is split by kind, and each reader means the same in a full
and a lean load (lean: text as categoricals, ``reads`` with READ_COLUMNS only, NARROW_READ_COLUMNS as
int32 where every value fits):
- ``trace.reads`` / ``trace.runs()``: the read syscalls (READ_OPS) as recorded, one row per run: the
  recorder merges consecutive complete reads of one size by one thread on one open file description
  into a row of ``count`` calls (``offset`` = the first call's, ``size``/``ret``/``latency_ns`` totals).
- ``trace.calls()``: the same reads one row per call (trace/runs.py spreads each run back out).
- ``trace.others``: every other application event (open, close, dup, mmap, munmap, lseek, fadvise,
  readahead, fork, thread, exec, exit), one row each.
- ``trace.events``: reads and others together in recorded order, all columns (a lean load reads the
  table again on first use).
- ``trace.pages``, ``trace.fuse``, ``trace.files``, ``trace.python_calls``, ``trace.tasks``: the other
  tables as stored.

Format versions (meta.json ``version``): v2 stores the kernel's ids as uint64 (above); v1 traces are
refused by number with "record it again" (their signed ids used -1 for unknown). Tables in
OPTIONAL_TABLES came later within v2: a trace without one loads it empty.
"""

import pyarrow as pa

EVENT_OPS = (
    "open", "close", "dup", "read", "pread", "readv", "preadv", "mmap", "munmap", "lseek",
    "fadvise", "readahead", "fork", "exec", "exit", "thread", "wait",
)
# wait rows (sched:sched_switch): a stretch a thread spent off the CPU waiting on file I/O, from
# ts_ns for latency_ns; arg = the index in WAIT_IN of what it waited in: a read syscall (ofd, dev,
# ino, path: the file), a page fault on a file mapping (dev, ino, path), another syscall the recorder
# follows (open, mmap, close ...), or blocked (D state) elsewhere. Per-thread totals (on CPU,
# runnable, off CPU) are in meta["sched"] (readtrace/record/session.py).
WAIT_IN = ("", "read", "fault", "syscall", "other")
# The read syscalls: the bulk of a trace (``Trace.reads``). A lean load (``load_trace(lean=True)``) reads
# them with only READ_COLUMNS, the columns a read needs (open-file, file and byte range, time, latency).
READ_OPS = ("read", "pread", "readv", "preadv")
READ_COLUMNS = ("ts_ns", "pid", "tid", "fd", "ofd", "path", "dev", "ino", "offset", "size", "ret", "latency_ns",
                "count")
# Read columns a lean load holds as int32 where the trace's values fit (sizes, latencies: byte sums
# and offsets are int64).
NARROW_READ_COLUMNS = ("size", "ret", "latency_ns")
PAGE_OPS = ("fault", "map_pages", "get_pages", "miss", "sync_ra", "async_ra")

RUN_SPAN_NS = 1_000_000  # the recorder's bound on a merged row's time span (record/program.py)

# events: the application (syscall) view, one row per syscall (reads: per run, see Readers).
#   fd: the syscall's fd (dup: the new fd; open: the fd returned); -1 for fork/thread/exec/exit/wait.
#   ofd: the open file description (kernel struct file *) the fd named; 0 unknown or none.
#   size: bytes asked for (open: the file's size at open).  ret: the syscall's return value
#        (exit: 1 when the whole process ended, else 0).
#   arg: the op's own argument: open flags, dup's old fd, lseek whence, fadvise advice, mmap/munmap
#        address, fork/thread: the new pid/tid, exec: the pid, exit: the shell-style exit code,
#        wait: the WAIT_IN index of what it waited in.
#   count: calls this row stands for. The recorder merges consecutive reads of one size by one
#        thread on one OFD (offset == previous end, all complete): offset = first, size/ret = totals,
#        latency_ns = summed; per-call size = size // count. 1 for everything else. A run is
#        closed once a call starts RUN_SPAN_NS (1 ms) or more after the run's first: ts_ns is
#        then true to 1 ms for every call in it (plots over time, interpolated call times).
EVENTS = pa.schema([
    ("ts_ns", pa.int64()),
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("comm", pa.string()),
    ("op", pa.string()),
    ("fd", pa.int32()),
    ("ofd", pa.int64()),
    ("path", pa.string()),
    ("dev", pa.int64()),
    ("ino", pa.uint64()),
    ("offset", pa.int64()),
    ("size", pa.int64()),
    ("ret", pa.int64()),
    ("latency_ns", pa.int64()),
    ("arg", pa.int64()),
    ("count", pa.int64()),
])

# pages: the page-cache view (filemap / readahead tracepoints), ranges in bytes.
#   count: tracepoint hits merged into this row (consecutive ranges of one op, thread and file,
#        within RUN_SPAN_NS = 1 ms of the row's ts_ns: a fault storm over 40 s is 40,000+ rows, not one).
PAGES = pa.schema([
    ("ts_ns", pa.int64()),
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("op", pa.string()),
    ("dev", pa.int64()),
    ("ino", pa.uint64()),
    ("path", pa.string()),
    ("offset", pa.int64()),
    ("size", pa.int64()),
    ("count", pa.int64()),
])

# fuse: one row per FUSE request, joined from fuse_request_send/end and the daemon's /dev/fuse read.
#   pid/tid: the requesting task (tid = fuse_in_header.pid); daemon_tid: the daemon thread that read it.
#   nodeid: fuse_in_header.nodeid of every request (0: the daemon's read was not seen).
#   fh: fuse_read_in.fh of READ requests (any u64 the daemon chose, 0 included); 0 for other opcodes.
#   reply_bytes: data bytes of the reply (reply length minus the 16-byte fuse_out_header), -1 on error.
FUSE = pa.schema([
    ("ts_ns", pa.int64()),
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("connection", pa.int64()),
    ("unique", pa.uint64()),
    ("opcode", pa.int32()),
    ("nodeid", pa.uint64()),
    ("fh", pa.uint64()),
    ("offset", pa.int64()),
    ("size", pa.int64()),
    ("reply_bytes", pa.int64()),
    ("latency_ns", pa.int64()),
    ("daemon_tid", pa.int32()),
])

# files: every file the traced tree opened (or faulted), with where it lives.
#   path: as the process that named it sees it (its mount namespace: a container's own paths);
#        fstype / mountpoint: of that namespace's mount holding it.
#   host_path: where the recorder's (the host's) mount namespace shows the same file (device and inode
#        checked), for a file named by a process in another mount namespace (record --cgroup/-p of a
#        container); null where the host shows it nowhere (a tmpfs mounted in the container) or where
#        the process shares the recorder's namespace (path is the host's then). Added within v2.
FILES = pa.schema([
    ("path", pa.string()),
    ("dev", pa.int64()),
    ("ino", pa.uint64()),
    ("size", pa.int64()),
    ("fstype", pa.string()),
    ("mountpoint", pa.string()),
    ("host_path", pa.string()),
])

# tasks: recorded tasks in a PID or mount namespace other than the recorder's (a container, a pod
#   without hostPID), with their ids as the container sees them. Every other table's pid/tid are the
#   host's; join on tid. Tasks of the recorder's own namespaces have no row. Added within v2.
#   ns_pid / ns_tid: the process and thread ids in the task's innermost PID namespace (NStgid/NSpid).
#   pid_ns / mnt_ns: the namespaces' ids (inode numbers of /proc/PID/ns/pid and /proc/PID/ns/mnt).
TASKS = pa.schema([
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("ns_pid", pa.int32()),
    ("ns_tid", pa.int32()),
    ("pid_ns", pa.uint64()),
    ("mnt_ns", pa.uint64()),
])

# python_calls: which Python loader call issued the reads (record of a Python command; inject/calls.py).
#   One row per call of a loader entry point (safetensors safe_open / get_tensor(s) / load_file,
#   torch.load, transformers and diffusers from_pretrained / from_single_file / load_state_dict),
#   written when the call returned (a call still running at the end is not in the table).
#   ts_ns / end_ns: the call's start and end, CLOCK_MONOTONIC ns (time.monotonic_ns: the probes'
#        clock, so a read of thread tid at ts is inside the call when ts_ns <= ts <= end_ns).
#   pid / tid: os.getpid() and the kernel thread id (threading.get_native_id): they join with
#        every other table's pid / tid.
#   call: the entry point ("safetensors.torch.load_file"); chain: the entry points this thread was
#        inside, outermost first, joined by " -> " (ends with call); depth: their number minus one.
#   path: the file or directory argument when it was one, else null. ok: 0 when it raised.
#   id: the call's number in its process (from 1); parent: the id of the call it ran inside (0: none).
#   Work a recorded call handed to another thread (a ThreadPoolExecutor task, a Thread it started)
#   is a row on the worker's tid with the submitting call's call, chain and depth and that call's
#   id as parent; the calls the worker makes continue that chain. id/parent were added within v2:
#   older traces load them as 0 (OPTIONAL_COLUMNS).
#   What each entry point's installed version accepts (its levers) is in meta["python_calls"].
PYTHON_CALLS = pa.schema([
    ("ts_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("pid", pa.int32()),
    ("tid", pa.int32()),
    ("depth", pa.int32()),
    ("call", pa.string()),
    ("chain", pa.string()),
    ("path", pa.string()),
    ("ok", pa.int8()),
    ("id", pa.int64()),
    ("parent", pa.int64()),
])

TABLES = {"events": EVENTS, "pages": PAGES, "fuse": FUSE, "files": FILES, "python_calls": PYTHON_CALLS,
          "tasks": TASKS}
OPTIONAL_TABLES = frozenset({"python_calls", "tasks"})  # added within v2: absent in older traces
# added within v2: filled with their default (0, null text) when absent
OPTIONAL_COLUMNS = {"python_calls": frozenset({"id", "parent"}), "files": frozenset({"host_path"})}

FUSE_OPCODES = {
    1: "LOOKUP", 3: "GETATTR", 14: "OPEN", 15: "READ", 18: "RELEASE", 25: "FLUSH",
    26: "INIT", 27: "OPENDIR", 28: "READDIR", 29: "RELEASEDIR", 38: "BATCH_FORGET",
    44: "READDIRPLUS", 46: "LSEEK",
}
FUSE_OPEN = 14
FUSE_READ = 15


def default_for(field: pa.Field):
    """The fill value of a column a caller left out: -1 for offsets/sizes/fds, 0 for ids, '' text."""
    if pa.types.is_string(field.type):
        return None
    if field.name in ("offset", "size", "fd", "ret"):
        return -1
    if field.name == "count":
        return 1
    return 0
