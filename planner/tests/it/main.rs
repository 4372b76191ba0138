//! The planner's tests, in one binary.

mod differential;
mod estimates;
mod findings;
mod fixture;
mod golden;
mod native_vs_brute;
mod writes;
