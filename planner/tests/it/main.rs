//! The planner's tests, in one binary.

mod estimates;
mod fixture;
mod golden;
mod native_vs_brute;
