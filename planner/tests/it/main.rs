//! The planner's tests, in one binary.

mod differential;
mod estimates;
mod fixture;
mod golden;
mod indexes;
mod writes;
