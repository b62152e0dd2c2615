//! The process's open-files limit, raised at start so that every connection, WAL and
//! snapshot file fits. Knows `setrlimit`, nothing of what the files are.

/// Raises the soft limit on open descriptors to the hard limit (each connection is one), and
/// says when `max_connections` cannot be reached even so.
pub fn raise_open_files_limit(max_connections: u64, shard_count: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "cannot read the open files limit");
        return;
    }
    let soft_before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            let error = std::io::Error::last_os_error();
            tracing::warn!(%error, soft = soft_before, "cannot raise the open files limit");
            limit.rlim_cur = soft_before;
        }
    }
    tracing::info!(
        soft = limit.rlim_cur,
        soft_at_start = soft_before,
        hard = limit.rlim_max,
        "open files limit (RLIMIT_NOFILE)"
    );
    // The shards' rings, event descriptors, WAL and snapshot files need some too.
    let reserved = 64 + 16 * shard_count as u64;
    if max_connections + reserved > limit.rlim_cur {
        tracing::warn!(
            max_connections,
            open_files_limit = limit.rlim_cur,
            "max_connections exceeds what the open files limit allows (about {}); accepts \
             beyond it fail: raise the hard limit (ulimit -Hn, LimitNOFILE=) or lower \
             max_connections",
            limit.rlim_cur.saturating_sub(reserved)
        );
    }
}
