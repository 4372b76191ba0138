//! The PostgreSQL wire protocol (issue 5): sessions, prepared statements,
//! portals, transactions as entity-group transactions, authentication, TLS,
//! cancellation, and the one place where errors become SQLSTATEs.
//!
//! Not built yet: this crate only fixes the dependency direction
//! (gateway → planner).
pub use tablegate_planner as planner;
