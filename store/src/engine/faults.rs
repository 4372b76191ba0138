//! Fault injection for tests: a layer that fails the engine's writes,
//! fsyncs or reads while a control file says so, so the error paths of a
//! failing disk run in the ordinary test suite against the real server.
//!
//! The control file (`StoreOptions::fault_file`; the server reads its path
//! from `TABLEGATE_INJECT_FAULTS`) holds one fault per line, and is read
//! again on every engine call while it exists:
//!
//! | line | effect |
//! | --- | --- |
//! | `write enospc` | writes fail before reaching the engine, as on a full disk |
//! | `write eio` | the same with an I/O error |
//! | `fsync eio` | writes reach the engine, then their journal fsync fails |
//! | `read eio` | every read fails with an I/O error |
//!
//! An empty or missing file injects nothing. Deliberately outside the
//! durable engine: the failures it injects are the ones the engine
//! reports, so everything above it (the health latch, SQLSTATEs, logs,
//! metrics) is exercised unchanged.

use std::ops::Bound;
use std::path::PathBuf;

use super::health::write_failure;
use super::{Bytes, Engine, KvIter, Mutation, Space, Visitor};
use crate::error::{Result, StoreError};

/// The fault layer over an engine.
#[derive(Debug)]
pub(crate) struct Faulty {
    inner: Box<dyn Engine>,
    control: PathBuf,
}

/// What the control file asks for now.
#[derive(Debug, Default)]
struct Faults {
    write: Option<i32>,
    fsync: Option<i32>,
    read: Option<i32>,
}

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

impl Faulty {
    pub(crate) fn new(inner: Box<dyn Engine>, control: PathBuf) -> Faulty {
        Faulty { inner, control }
    }

    fn faults(&self) -> Faults {
        let mut faults = Faults::default();
        let Ok(text) = std::fs::read_to_string(&self.control) else {
            return faults;
        };
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(op), Some(errno)) = (words.next(), words.next()) else {
                continue;
            };
            let errno = match errno {
                "enospc" => ENOSPC,
                "eio" => EIO,
                _ => continue,
            };
            match op {
                "write" => faults.write = Some(errno),
                "fsync" => faults.fsync = Some(errno),
                "read" => faults.read = Some(errno),
                _ => {}
            }
        }
        faults
    }

    fn read_fault(&self) -> Result<()> {
        match self.faults().read {
            Some(errno) => Err(StoreError::Engine(format!(
                "read failed: {} (injected)",
                std::io::Error::from_raw_os_error(errno)
            ))),
            None => Ok(()),
        }
    }
}

fn injected(what: &str, errno: i32) -> StoreError {
    let e = std::io::Error::from_raw_os_error(errno);
    match write_failure(what, &e) {
        StoreError::WritesStopped { cause, disk_full } => StoreError::WritesStopped {
            cause: format!("{cause} (injected)"),
            disk_full,
        },
        other => other,
    }
}

impl Engine for Faulty {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        self.read_fault()?;
        self.inner.get(space, key)
    }

    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        if let Err(e) = self.read_fault() {
            return Box::new(std::iter::once(Err(e)));
        }
        self.inner.scan(space, start, end)
    }

    fn visit(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        f: &mut Visitor<'_>,
    ) -> Result<()> {
        self.read_fault()?;
        self.inner.visit(space, start, end, f)
    }

    fn last_in(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<Option<(Bytes, Bytes)>> {
        self.read_fault()?;
        self.inner.last_in(space, start, end)
    }

    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        let faults = self.faults();
        if let Some(errno) = faults.write {
            return Err(injected("journal write", errno));
        }
        self.inner.apply(batch)?;
        // A deferred batch's fsync is the sync that ends its deferral.
        match faults.fsync {
            Some(errno) if !crate::api::sync_deferred_here() => {
                Err(injected("journal fsync", errno))
            }
            _ => Ok(()),
        }
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()?;
        match self.faults().fsync {
            Some(errno) => Err(injected("journal fsync", errno)),
            None => Ok(()),
        }
    }

    fn disk_space(&self) -> u64 {
        self.inner.disk_space()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory::MemoryEngine;

    fn put(k: &[u8]) -> Mutation {
        Mutation::Put {
            space: Space::Meta,
            key: k.to_vec(),
            value: b"v".to_vec(),
        }
    }

    #[test]
    fn the_control_file_turns_faults_on_and_off() {
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("faults");
        let engine = Faulty::new(Box::new(MemoryEngine::default()), control.clone());
        engine.apply(vec![put(b"a")]).unwrap();

        std::fs::write(&control, "write enospc\n").unwrap();
        let e = engine.apply(vec![put(b"b")]).unwrap_err();
        assert!(
            matches!(
                &e,
                StoreError::WritesStopped {
                    disk_full: true,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            engine.get(Space::Meta, b"b").unwrap().is_none(),
            "not written"
        );

        std::fs::write(&control, "fsync eio\n").unwrap();
        let e = engine.apply(vec![put(b"c")]).unwrap_err();
        assert!(
            matches!(&e, StoreError::WritesStopped { disk_full: false, cause } if cause.contains("fsync")),
            "{e:?}"
        );
        assert!(
            engine.get(Space::Meta, b"c").unwrap().is_some(),
            "written, not synced"
        );

        std::fs::write(&control, "read eio\n").unwrap();
        assert!(matches!(
            engine.get(Space::Meta, b"a"),
            Err(StoreError::Engine(_))
        ));
        assert!(
            engine
                .scan(Space::Meta, Bound::Unbounded, Bound::Unbounded)
                .next()
                .unwrap()
                .is_err()
        );

        std::fs::write(&control, "").unwrap();
        assert!(engine.get(Space::Meta, b"a").unwrap().is_some());
        engine.apply(vec![put(b"d")]).unwrap();
    }
}
