//! SQL text to plans (issue 4): parse, bind, classify every table access as
//! point / row-range / partition-range / full-scan, derive key spans and the
//! residual filter, and render EXPLAIN.
//!
//! Not built yet: this crate only fixes the dependency direction
//! (planner → catalog).
pub use tablegate_catalog as catalog;
