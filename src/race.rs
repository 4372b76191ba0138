//! The seeds' running-race registrations, generated deterministically.
//!
//! PartitionKey: event and distance (`2026 New York City Marathon__Full`).
//! Each runner is written twice in one entity-group transaction, the seeds'
//! dual-row pattern for two dominant queries: by bib number
//! (`BIB:01234__John__M__55`) and by age (`AGE:055__01234__John__M`).

use tablegate_store::{DateTime, EntityWrite, Operation, Value};

/// The events of the demo data set.
pub const EVENTS: [&str; 6] = [
    "2026 Berlin Marathon",
    "2026 Boston Marathon",
    "2026 Chicago Marathon",
    "2026 London Marathon",
    "2026 New York City Marathon",
    "2026 Tokyo Marathon",
];

/// Distances per event.
pub const DISTANCES: [&str; 3] = ["10K", "Full", "Half"];

const FIRST_NAMES: [&str; 16] = [
    "Ada", "Ben", "Chloé", "Dmitri", "Emma", "Farid", "Grace", "Hiro", "Inès", "John", "Kwame",
    "Lena", "Mateo", "Nadia", "Oskar", "Priya",
];

/// One registered runner.
#[derive(Debug, Clone, PartialEq)]
pub struct Runner {
    /// Bib number, unique within its partition.
    pub bib: u32,
    /// First name.
    pub name: &'static str,
    /// `M` or `F`.
    pub gender: &'static str,
    /// Age in years.
    pub age: u32,
    /// Registration time.
    pub registered: DateTime,
}

/// The PartitionKey of an event and distance.
pub fn partition_key(event: &str, distance: &str) -> String {
    format!("{event}__{distance}")
}

/// Every PartitionKey of the data set, in key order.
pub fn partition_keys() -> Vec<String> {
    let mut v: Vec<String> = EVENTS
        .iter()
        .flat_map(|e| DISTANCES.iter().map(move |d| partition_key(e, d)))
        .collect();
    v.sort();
    v
}

/// Runner `i` of a partition (deterministic in the partition and `i`).
pub fn runner(pk: &str, i: u32) -> Runner {
    let mut x = xxhash(pk) ^ u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let name = FIRST_NAMES[(next() % FIRST_NAMES.len() as u64) as usize];
    let gender = if next() % 2 == 0 { "F" } else { "M" };
    let age = 18 + (next() % 60) as u32;
    // Registrations over the first half of 2026.
    let registered = DateTime(1_767_225_600_000_000 + (next() % 15_638_400) as i64 * 1_000_000);
    Runner {
        bib: 1 + i,
        name,
        gender,
        age,
        registered,
    }
}

fn xxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The bib-number row key.
pub fn bib_key(r: &Runner) -> String {
    format!("BIB:{:05}__{}__{}__{}", r.bib, r.name, r.gender, r.age)
}

/// The age row key.
pub fn age_key(r: &Runner) -> String {
    format!("AGE:{:03}__{:05}__{}__{}", r.age, r.bib, r.name, r.gender)
}

/// The two inserts of one runner: one entity-group transaction.
pub fn registration(pk: &str, r: &Runner) -> [Operation; 2] {
    let row = |rk: String| {
        Operation::Insert(
            EntityWrite::new(pk, rk)
                .with("bib", Value::Int32(r.bib as i32))
                .with("name", Value::String(r.name.to_owned()))
                .with("gender", Value::String(r.gender.to_owned()))
                .with("age", Value::Int32(r.age as i32))
                .with("registered", Value::DateTime(r.registered)),
        )
    };
    [row(bib_key(r)), row(age_key(r))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runners_are_deterministic_and_keys_follow_the_seeds() {
        let pk = partition_key("2026 New York City Marathon", "Full");
        assert_eq!(runner(&pk, 7), runner(&pk, 7));
        let r = Runner {
            bib: 1234,
            name: "John",
            gender: "M",
            age: 55,
            registered: DateTime(0),
        };
        assert_eq!(bib_key(&r), "BIB:01234__John__M__55");
        assert_eq!(age_key(&r), "AGE:055__01234__John__M");
        assert_eq!(partition_keys().len(), 18);
    }
}
