//! The Azure backend's integration tests, in one binary, against Azurite
//! (`TABLEGATE_AZURITE`, see [`azurite`]) and the embedded store.
//!
//! - [`conformance`] — the store trait's semantics, one generic test body
//!   run against both `LocalStore` and `AzureStore`; the known differences
//!   are listed there (`DIVERGENCES`), with the error-code mapping test;
//! - [`differential`] — random operation sequences on both, compared step
//!   by step (proptest; `PROPTEST_CASES` honoured);
//! - [`signing`] — SharedKey strings and signatures checked against the
//!   documented layout and an independent HMAC (python3), and Azurite
//!   refusing a wrong key.

mod azurite;
mod conformance;
mod differential;
mod signing;
