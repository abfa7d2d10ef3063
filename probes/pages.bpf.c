/* Page-cache view: filemap and readahead tracepoints of the traced tree, page ranges per file.
 * Consecutive hits of one kind by one thread on one file (e.g. a fault per page while walking a
 * mapping) are merged: offset/size in pages, count = tracepoint hits. Pages the FUSE daemon reads
 * from its backing store are not recorded: they are the lower file system's cache and would double
 * count bytes; the FUSE view records what the daemon was asked for instead. */

struct page_key {
    u32 tid;
    u32 kind;
};
BPF_HASH(page_runs, struct page_key, struct rt_event, 16384);

static __always_inline void flush_page_run(u32 tid, u32 kind)
{
    struct page_key k = {.tid = tid, .kind = kind};
    struct rt_event *r = page_runs.lookup(&k);
    if (!r)
        return;
    submit_event(r);
    page_runs.delete(&k);
}

static __always_inline void flush_page_runs(u32 tid)
{
    flush_page_run(tid, RT_FAULT);
    flush_page_run(tid, RT_MAP_PAGES);
    flush_page_run(tid, RT_GET_PAGES);
    flush_page_run(tid, RT_MISS);
}

static __always_inline int page_event(u16 kind, u32 dev, u64 ino, u64 first, u64 npages, int merge)
{
    struct rt_event e = {};
    struct page_key k = {.tid = current_tid(), .kind = kind};
    struct rt_event *r;
    if (merge && COALESCE) {
        r = page_runs.lookup(&k);
        if (r) {
            if (r->dev == dev && r->ino == ino && r->offset + r->size == first) {
                r->size += npages;
                r->count += 1;
                return 0;
            }
            submit_event(r);
        }
    }
    e.ts_ns = bpf_ktime_get_ns();
    e.pid = current_tgid();
    e.tid = k.tid;
    e.kind = kind;
    e.fd = -1;
    e.dev = dev;
    e.ino = ino;
    e.offset = first;
    e.size = npages;
    e.ret = -1;
    e.count = 1;
    if (merge && COALESCE && page_runs.update(&k, &e) == 0)
        return 0;
    submit_event(&e);
    return 0;
}

TRACEPOINT_PROBE(filemap, mm_filemap_fault)
{
    if (!traced()) return 0;
    return page_event(RT_FAULT, args->s_dev, args->i_ino, args->index, 1, 1);
}

TRACEPOINT_PROBE(filemap, mm_filemap_map_pages)
{
    if (!traced()) return 0;
    return page_event(RT_MAP_PAGES, args->s_dev, args->i_ino, args->index,
                      args->last_index - args->index + 1, 1);
}

TRACEPOINT_PROBE(filemap, mm_filemap_get_pages)
{
    if (!traced()) return 0;
    return page_event(RT_GET_PAGES, args->s_dev, args->i_ino, args->index,
                      args->last_index - args->index + 1, 1);
}

TRACEPOINT_PROBE(filemap, mm_filemap_add_to_page_cache)
{
    if (!traced()) return 0;
    return page_event(RT_MISS, args->s_dev, args->i_ino, args->index, 1ULL << args->order, 1);
}

TRACEPOINT_PROBE(readahead, page_cache_sync_ra)
{
    if (!traced()) return 0;
    return page_event(RT_SYNC_RA, args->s_dev, args->i_ino, args->index, args->req_count, 0);
}

TRACEPOINT_PROBE(readahead, page_cache_async_ra)
{
    if (!traced()) return 0;
    return page_event(RT_ASYNC_RA, args->s_dev, args->i_ino, args->index, args->req_count, 0);
}
