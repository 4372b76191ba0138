//! End-to-end tests: the real `tablegate` binary on a free loopback port,
//! driven by real `psql` and by tokio-postgres. One test binary, modules
//! by client.

mod abuse;
mod analytics;
mod auth;
mod azure;
mod bench;
mod binary;
mod clients;
mod console;
mod copy;
mod corpus;
mod crash;
mod driver;
mod faults;
mod flight;
mod hostile;
mod pgref;
mod product;
mod psql;
mod rng;
mod scripts;
mod server;
mod tls_driver;
mod typed_keys;
mod write_diff;
mod writes;
