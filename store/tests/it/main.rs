//! The store's integration tests, in one binary (each file directly in
//! `tests/` would be its own binary linking everything).

mod basics;
mod compaction_memory;
mod crash;
mod limits;
mod model;
mod partition;
mod remote_scan;
