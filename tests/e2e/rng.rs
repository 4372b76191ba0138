//! The seeded generator of the e2e tests (fastrand, as in the planner's and
//! store's tests), with the few draws they share: the same rows in
//! tablegate and PostgreSQL, the same abuse and crash rounds on every run.

/// A seeded generator; each test file adds the draws of its own domain.
#[derive(Debug, Clone)]
pub struct Rng(fastrand::Rng);

impl Rng {
    /// The generator for `seed`: the same seed, the same sequence.
    pub fn new(seed: u64) -> Self {
        Rng(fastrand::Rng::with_seed(seed))
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.u64(..n)
    }
}
