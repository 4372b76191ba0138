//! A deterministic xorshift64 generator, shared by the tests that need
//! reproducible data (the same rows in tablegate and PostgreSQL, the same
//! abuse and crash rounds on every run).

/// xorshift64: a seed (not zero) and its sequence.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
