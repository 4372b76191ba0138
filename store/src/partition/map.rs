//! The partition map: each table's PartitionKey space cut into contiguous
//! range partitions, each served by one partition server.
//!
//! A range partition is `[lo, next.lo)`; the first starts at `""` (the
//! smallest key). Boundaries are PartitionKeys, so one PartitionKey is never
//! split. The map persists in a system table of the entity store itself
//! (`tgsys_partition_map`: PartitionKey = table, RowKey = range lower bound,
//! `server` property), so it survives restarts; data never moves, only the
//! assignment does.

/// One range partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    /// Inclusive lower PartitionKey bound.
    pub(crate) lo: String,
    /// Serving partition server.
    pub(crate) server: usize,
    /// Offline (moving) until this time, in clock microseconds.
    pub(crate) offline_until: i64,
}

/// A table's ranges, sorted by `lo`, the first with `lo == ""`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableMap {
    pub(crate) ranges: Vec<Range>,
}

impl TableMap {
    /// One range on `server`.
    pub(crate) fn single(server: usize) -> Self {
        TableMap {
            ranges: vec![Range {
                lo: String::new(),
                server,
                offline_until: i64::MIN,
            }],
        }
    }

    /// Index of the range containing PartitionKey `pk`.
    pub(crate) fn locate(&self, pk: &str) -> usize {
        // ranges[0].lo == "" <= every key, so the result is >= 0.
        self.ranges.partition_point(|r| r.lo.as_str() <= pk) - 1
    }

    /// Exclusive upper bound of range `i` (`None` for the last).
    pub(crate) fn hi(&self, i: usize) -> Option<&str> {
        self.ranges.get(i + 1).map(|r| r.lo.as_str())
    }

    /// Where a page that starts in range `i` must stop: the first later
    /// range served by a different server.
    pub(crate) fn server_boundary_after(&self, i: usize) -> Option<&str> {
        let server = self.ranges[i].server;
        self.ranges[i + 1..]
            .iter()
            .find(|r| r.server != server)
            .map(|r| r.lo.as_str())
    }

    /// Splits the range containing `at` so that a new range starts at `at`.
    /// Returns the new range's index, or `None` if `at` already starts one.
    pub(crate) fn split(&mut self, at: &str) -> Option<usize> {
        let i = self.locate(at);
        if self.ranges[i].lo == at {
            return None;
        }
        let new = Range {
            lo: at.to_owned(),
            server: self.ranges[i].server,
            offline_until: self.ranges[i].offline_until,
        };
        self.ranges.insert(i + 1, new);
        Some(i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_split_and_boundaries() {
        let mut m = TableMap::single(0);
        assert_eq!(m.locate(""), 0);
        assert_eq!(m.split("m"), Some(1));
        assert_eq!(m.split("m"), None);
        assert_eq!(m.split("t"), Some(2));
        m.ranges[2].server = 1;
        assert_eq!(m.locate("a"), 0);
        assert_eq!(m.locate("m"), 1);
        assert_eq!(m.locate("s\u{1}"), 1);
        assert_eq!(m.locate("zzz"), 2);
        assert_eq!(m.hi(0), Some("m"));
        assert_eq!(m.hi(2), None);
        // Ranges 0 and 1 share server 0: a page from range 0 runs to "t".
        assert_eq!(m.server_boundary_after(0), Some("t"));
        assert_eq!(m.server_boundary_after(2), None);
    }
}
