//! The PostgreSQL wire protocol in front of the planner: sessions, prepared
//! statements, portals, transactions as entity-group transactions,
//! authentication, TLS, cancellation — and [`sqlstate`], the one place
//! where errors become SQLSTATEs.
//!
//! Built so far: the SQLSTATE mapping. The server itself is the next step.

pub mod sqlstate;

pub use sqlstate::PgError;
