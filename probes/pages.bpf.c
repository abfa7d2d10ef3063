/* Page-cache view: filemap and readahead tracepoints of the traced tree, page ranges per file.
 * Consecutive hits of one kind by one thread on one file (e.g. a fault per page while walking a
 * mapping) are merged: offset/size in pages, count = tracepoint hits. Pages the FUSE daemon reads
 * from its backing store are not recorded: they are the lower file system's cache and would double
 * count bytes; the FUSE view records what the daemon was asked for instead. */

#ifndef READTRACE_PAGES_BPF_C
#define READTRACE_PAGES_BPF_C

#include "common.bpf.c"
#include "sched.bpf.c"                /* fault_begin */

/* RT_FAULT .. RT_MISS keep a run per thread (their count is substituted: record/program.py) */
BPF_ARRAY(page_runs, struct rt_event, SLOTS * MERGED_PAGE_KINDS);  /* h.count == 0: empty; h.tid: owner */

static __always_inline u32 page_slot(u32 tid, u32 kind)
{
    return slot_of(tid) * MERGED_PAGE_KINDS + (kind - RT_FAULT);
}

static __always_inline void flush_page_run(u32 tid, u32 kind)
{
    u32 slot = page_slot(tid, kind);
    struct rt_event *r = page_runs.lookup(&slot);
    if (!r || !r->h.count || r->h.tid != tid)
        return;
    submit_event(r);
    r->h.count = 0;
}

static __always_inline void flush_page_runs(u32 tid)
{
    flush_page_run(tid, RT_FAULT);
    flush_page_run(tid, RT_MAP_PAGES);
    flush_page_run(tid, RT_GET_PAGES);
    flush_page_run(tid, RT_MISS);
}

/* mapping: the struct address_space * when known (raw tracepoints), kept in the record so the next
 * hit can extend the run without reading the inode again. */
static __always_inline int page_event(u16 kind, u32 dev, u64 ino, u64 first, u64 npages, int merge, u64 mapping)
{
    struct rt_event e = {};
    u32 tid = current_tid();
    u32 slot = page_slot(tid, kind);
    struct rt_event *r = 0;
    if (merge && COALESCE) {
        r = page_runs.lookup(&slot);
        if (r && r->h.count) {
            if (r->h.tid == tid && r->pages.dev == dev && r->pages.ino == ino
                && r->pages.first + r->pages.npages == first && bpf_ktime_get_ns() - r->h.ts_ns < RUN_SPAN_NS) {
                r->pages.npages += npages;
                r->h.count += 1;
                return 0;
            }
            submit_event(r);
            r->h.count = 0;
        }
    }
    head_now(&e.h, kind);
    e.pages.dev = dev;
    e.pages.ino = ino;
    e.pages.first = first;
    e.pages.npages = npages;
    e.pages.mapping = mapping;
    if (r) {
        __builtin_memcpy(r, &e, sizeof(e));
        return 0;
    }
    submit_event(&e);
    return 0;
}

/* The three hot filemap events are raw tracepoints (struct address_space *mapping, pgoff_t index
 * [, pgoff_t last_index]): no perf trace-buffer copy per hit, and a run extends on the same mapping
 * pointer without touching the inode. Only a new run reads mapping->host's ino and s_dev. */
static __always_inline int mapping_event(u16 kind, u64 mapping, u64 first, u64 npages)
{
    u32 tid = current_tid();
    u32 slot = page_slot(tid, kind);
    u64 host, sb, ino = 0;
    u32 dev = 0;
    struct rt_event *r = page_runs.lookup(&slot);
    if (COALESCE && r && r->h.count && r->h.tid == tid && r->pages.mapping == mapping
        && r->pages.first + r->pages.npages == first && bpf_ktime_get_ns() - r->h.ts_ns < RUN_SPAN_NS) {
        r->pages.npages += npages;
        r->h.count += 1;
        return 0;
    }
    host = read_ptr(mapping + ADDRESS_SPACE_HOST);
    if (!host)
        return 0;
    bpf_probe_read_kernel(&ino, sizeof(ino), (void *)(host + INODE_I_INO));
    sb = read_ptr(host + INODE_I_SB);
    if (sb)
        bpf_probe_read_kernel(&dev, sizeof(dev), (void *)(sb + SUPER_BLOCK_S_DEV));
    return page_event(kind, dev, ino, first, npages, 1, mapping);
}

RAW_TRACEPOINT_PROBE(mm_filemap_fault)
{
    if (!traced()) return 0;
    fault_begin(ctx->args[0]);               /* sched.bpf.c: a wait from now on is this fault's */
    return mapping_event(RT_FAULT, ctx->args[0], ctx->args[1], 1);
}

RAW_TRACEPOINT_PROBE(mm_filemap_map_pages)
{
    if (!traced()) return 0;
    return mapping_event(RT_MAP_PAGES, ctx->args[0], ctx->args[1], ctx->args[2] - ctx->args[1] + 1);
}

RAW_TRACEPOINT_PROBE(mm_filemap_get_pages)
{
    if (!traced()) return 0;
    return mapping_event(RT_GET_PAGES, ctx->args[0], ctx->args[1], ctx->args[2] - ctx->args[1] + 1);
}

TRACEPOINT_PROBE(filemap, mm_filemap_add_to_page_cache)
{
    if (!traced()) return 0;
    return page_event(RT_MISS, args->s_dev, args->i_ino, args->index, 1ULL << args->order, 1, 0);
}

TRACEPOINT_PROBE(readahead, page_cache_sync_ra)
{
    if (!traced()) return 0;
    return page_event(RT_SYNC_RA, args->s_dev, args->i_ino, args->index, args->req_count, 0, 0);
}

TRACEPOINT_PROBE(readahead, page_cache_async_ra)
{
    if (!traced()) return 0;
    return page_event(RT_ASYNC_RA, args->s_dev, args->i_ino, args->index, args->req_count, 0, 0);
}

#endif
