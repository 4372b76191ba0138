//! Local secondary indexes: what an index entry's RowKey is.
//!
//! The Table service indexes only PartitionKey and RowKey. The seeds'
//! answer for a second access path inside a partition is to write each
//! entity again under another RowKey (the race example's `BIB:` and `AGE:`
//! rows) in the same entity-group transaction; `CREATE INDEX` automates
//! that. An index entry lives in its base entity's partition:
//!
//! ```text
//! RowKey  = U+10FFFF · index id (4 digits) · '.' · component… · base RowKey
//! component = 'v' · body · '!'   (a value)
//!           | '~!'               (NULL: sorts after every value)
//! ```
//!
//! - **Reserved**: U+10FFFF is the largest code point, so in each partition
//!   every index entry sorts after every base entity (a base RowKey may not
//!   begin with it; [`check_base_row_key`]); reads of the table stop below
//!   it ([`user_rows`]).
//! - **Order-preserving bodies** using only characters above `!`, so a
//!   value's entry sorts with the value and an equality on the leading
//!   columns is one RowKey prefix ([`IndexDef::lookup_prefix`]): text and
//!   binary as the hex of their bytes, numbers and times as sign-flipped
//!   64-bit hex, booleans `0`/`1`. Every body is valid in a RowKey (no `/ \ #
//!   ?` or control characters), so the Azure backend stores it as is.
//! - **Unique**: a UNIQUE index's entry ends after its components (one
//!   entry per value, so a second insert of the value fails in the EGT) and
//!   names its base entity in [`BASE_PROPERTY`]; a non-unique entry, or a
//!   unique one holding a NULL (NULLs are distinct, as in PostgreSQL), ends
//!   with the base RowKey.
//!
//! **Global indexes** (`CREATE INDEX … GLOBAL`, the seeds' Index Table
//! pattern) live in a table of their own, [`IndexDef::global_table`],
//! keyed by value across every partition:
//!
//! ```text
//! forward: PartitionKey = the first column's component
//!          RowKey       = the other components · base PK length (4 hex) · base PK · base RowKey
//! reverse: PartitionKey = base PK, RowKey = U+10FFFF · base RowKey  (which forward entry is the row's)
//! ```
//!
//! A write does not touch them: it leaves a queue entry
//! ([`queue_key`]: U+10FFFF `q.` base RowKey) in the row's own
//! partition, in the row's own entity-group transaction, and the gateway's
//! maintainer brings the index table up to date from it (the seeds'
//! eventually-consistent-transactions pattern).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Bound;

use serde::{Deserialize, Serialize};
use tablegate_store::query::KeyInterval;
use tablegate_store::{KeyBox, Value, limits};

use crate::error::{CatalogError, Result};
use crate::table::TableDef;
use crate::types::SqlType;

/// The first character of every index entry's RowKey.
pub const INDEX_ROW_PREFIX: char = '\u{10FFFF}';

/// The property of an index entry naming its base entity's RowKey.
pub const BASE_PROPERTY: &str = "tg_base";

/// Indexes one table may have (each one is written on every insert).
pub const MAX_INDEXES_PER_TABLE: usize = 8;

/// Columns one index may have.
pub const MAX_INDEX_COLUMNS: usize = 4;

/// A local secondary index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Name (unique among all indexes, as in PostgreSQL's schema).
    pub name: String,
    /// Its number within the table: the RowKey prefix of its entries.
    pub id: u32,
    /// Indexed property columns, in order.
    pub columns: Vec<String>,
    /// CREATE UNIQUE INDEX: at most one entity per value in a partition.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unique: bool,
    /// Still being built over the rows that were there (CREATE INDEX
    /// records the index before it backfills): writes keep its entries,
    /// lookups do not use it yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub building: bool,
    /// CREATE INDEX … GLOBAL: entries in an index table of their own,
    /// maintained asynchronously (see the module's summary).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
    /// INCLUDE: property columns whose values each entry carries too (with
    /// the indexed ones), so a query reading only those is answered from
    /// the entries (local indexes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<String>,
}

/// What CREATE INDEX asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexSpec {
    /// Indexed property columns, in order.
    pub columns: Vec<String>,
    /// INCLUDE columns.
    pub include: Vec<String>,
    /// UNIQUE.
    pub unique: bool,
    /// GLOBAL.
    pub global: bool,
}

/// Names of the stores' tables that hold global indexes start with this
/// (a user table may not).
pub const GLOBAL_TABLE_PREFIX: &str = "tgix";

/// The first characters of a queue entry's RowKey: the base row after
/// them changed, and its global index entries are due.
pub const QUEUE_ROW_PREFIX: &str = "\u{10FFFF}q.";

/// The queue entry of base row `base_rk` (in the row's partition).
pub fn queue_key(base_rk: &str) -> String {
    format!("{QUEUE_ROW_PREFIX}{base_rk}")
}

/// Every queue entry's RowKey.
pub fn queue_entries() -> KeyInterval {
    KeyInterval::prefix(QUEUE_ROW_PREFIX)
}

/// The property of a global index entry naming its base entity's
/// PartitionKey (its RowKey is [`BASE_PROPERTY`]).
pub const BASE_PK_PROPERTY: &str = "tg_base_pk";

/// The properties of a reverse entry naming the row's forward entry.
pub const FORWARD_PK_PROPERTY: &str = "tg_fwd_pk";
/// See [`FORWARD_PK_PROPERTY`].
pub const FORWARD_RK_PROPERTY: &str = "tg_fwd_rk";

/// The reverse entry's keys (in the index table) of base row (`pk`, `rk`).
pub fn reverse_key(pk: &str, rk: &str) -> (String, String) {
    (pk.to_owned(), format!("{INDEX_ROW_PREFIX}{rk}"))
}

/// One index entry: its RowKey and, for an index with INCLUDE, the values
/// it carries.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Position of the index in [`TableDef::indexes`].
    pub index: usize,
    /// The entry's RowKey.
    pub row_key: String,
    /// The indexed and included columns' values, as the base entity's
    /// properties (empty without INCLUDE).
    pub covered: Vec<(String, Value)>,
}

/// Entries are equal when the stored entities would be: values compare
/// exactly (-0 is not 0: an entry carrying 0 for a row holding -0 would
/// answer an index-only read wrongly).
impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        self.index == other.index
            && self.row_key == other.row_key
            && self.covered.len() == other.covered.len()
            && self
                .covered
                .iter()
                .zip(&other.covered)
                .all(|((n, a), (m, b))| n == m && same(a, b))
    }
}

/// Whether two values are the same stored value: doubles compare by
/// their bits (-0 is not 0, NaN is NaN), as an index-only read must.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// [`same`] for every property of two entities.
pub fn same_properties(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((n, x), (m, y))| n == m && same(x, y))
}

impl IndexDef {
    /// The store table holding a global index's entries of table `table`:
    /// a hash of the table's name and the index id, so a table dropped
    /// and created again under its name reuses no leftover.
    pub fn global_table(&self, table: &str) -> String {
        // FNV-1a: stable across builds and platforms.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in table.bytes().chain([0]).chain(self.id.to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{GLOBAL_TABLE_PREFIX}{h:016x}{}", self.id)
    }

    /// The forward entry (PartitionKey, RowKey) of a global index for base
    /// row (`base_pk`, `base_rk`) with these properties; an error when a
    /// key would exceed the store's key length.
    pub fn global_entry(
        &self,
        table: &TableDef,
        props: &BTreeMap<String, Value>,
        base_pk: &str,
        base_rk: &str,
    ) -> Result<(String, String)> {
        let mut comps = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            let mut k = String::new();
            match props.get(c) {
                Some(v) => component(&mut k, v),
                None => k.push_str("~!"),
            }
            comps.push(k);
        }
        let pk = comps[0].clone();
        let mut rk = comps[1..].concat();
        let _ = write!(rk, "{:04x}", base_pk.encode_utf16().count());
        rk.push_str(base_pk);
        rk.push_str(base_rk);
        let reverse = reverse_key(base_pk, base_rk).1;
        for key in [&pk, &rk, &reverse] {
            self.check_length(table, key)?;
        }
        Ok((pk, rk))
    }

    /// Where in its index table a global index lookup reads, for the
    /// local entry RowKeys `local` ([`IndexDef::lookup_prefix`],
    /// [`IndexDef::lookup_range`], [`IndexDef::lookup_text_prefix`]) with
    /// `eq` leading equalities: the same order, with the first component
    /// as PartitionKey.
    pub fn global_lookup(
        &self,
        table: &TableDef,
        eq: &[Value],
        local: &KeyInterval,
    ) -> Option<KeyBox> {
        let pre = self.prefix();
        let strip = |b: &Bound<String>, by: &str| -> Option<Bound<String>> {
            Some(match b {
                Bound::Included(k) => Bound::Included(k.strip_prefix(by)?.to_owned()),
                Bound::Excluded(k) => Bound::Excluded(k.strip_prefix(by)?.to_owned()),
                Bound::Unbounded => Bound::Unbounded,
            })
        };
        let rows = user_rows();
        if eq.is_empty() {
            return Some(KeyBox {
                pk: KeyInterval {
                    lo: strip(&local.lo, &pre)?,
                    hi: strip(&local.hi, &pre)?,
                },
                rk: rows,
            });
        }
        let first = self.lookup_prefix(table, &eq[..1])?;
        let pk = first.strip_prefix(&pre)?.to_owned();
        let all = self.lookup_prefix(table, eq)?;
        let rk = if *local == KeyInterval::prefix(&all) {
            KeyInterval::prefix(&all[first.len()..])
        } else {
            KeyInterval {
                lo: strip(&local.lo, &first)?,
                hi: strip(&local.hi, &first)?,
            }
        };
        Some(KeyBox {
            pk: KeyInterval::point(pk),
            rk: rk.intersect(&rows),
        })
    }

    /// The RowKey prefix every entry of this index starts with.
    pub fn prefix(&self) -> String {
        format!("{INDEX_ROW_PREFIX}{:04}.", self.id)
    }

    /// Every entry RowKey of this index (DROP INDEX, verification).
    pub fn all_entries(&self) -> KeyInterval {
        KeyInterval::prefix(&self.prefix())
    }

    /// The entry RowKey for a base entity with these properties; an error
    /// when it would exceed the store's key length (PostgreSQL's "index
    /// row size exceeds maximum").
    pub fn entry_key(
        &self,
        table: &TableDef,
        props: &BTreeMap<String, Value>,
        base_rk: &str,
    ) -> Result<String> {
        let mut key = self.prefix();
        let mut null = false;
        for c in &self.columns {
            match props.get(c) {
                Some(v) => component(&mut key, v),
                None => {
                    null = true;
                    key.push_str("~!");
                }
            }
        }
        if !self.unique || null {
            key.push_str(base_rk);
        }
        self.check_length(table, &key)?;
        Ok(key)
    }

    /// The entry of `table.indexes[index]` (this index) for a base entity
    /// with these properties.
    pub fn entry(
        &self,
        index: usize,
        table: &TableDef,
        props: &BTreeMap<String, Value>,
        base_rk: &str,
    ) -> Result<Entry> {
        let covered = if self.include.is_empty() {
            Vec::new()
        } else {
            self.columns
                .iter()
                .chain(&self.include)
                .filter_map(|c| props.get(c).map(|v| (c.clone(), v.clone())))
                .collect()
        };
        Ok(Entry {
            index,
            row_key: self.entry_key(table, props, base_rk)?,
            covered,
        })
    }

    /// Whether a query reading only `columns` (property names) is answered
    /// from this index's entries, without the base entities.
    pub fn covers<'a>(&self, mut columns: impl Iterator<Item = &'a str>) -> bool {
        !self.include.is_empty()
            && !self.global
            && columns.all(|c| self.columns.iter().chain(&self.include).any(|x| x == c))
    }

    /// An entry key longer than the store's keys may be is an error
    /// (PostgreSQL's "index row size exceeds maximum").
    fn check_length(&self, table: &TableDef, key: &str) -> Result<()> {
        let units = key.encode_utf16().count();
        if units > limits::MAX_KEY_UTF16 {
            return Err(CatalogError::IndexRowTooLong {
                index: self.name.clone(),
                table: table.name.clone(),
                units,
            });
        }
        Ok(())
    }

    /// The RowKey prefix of the entries whose leading columns equal
    /// `values` (one per column, at most [`IndexDef::columns`]); `None`
    /// when a value is not one the column can hold, so no entity matches.
    pub fn lookup_prefix(&self, table: &TableDef, values: &[Value]) -> Option<String> {
        let mut key = self.prefix();
        for (c, v) in self.columns.iter().zip(values) {
            let ty = table.columns.iter().find(|d| &d.name == c)?.ty;
            component(&mut key, &normalize(ty, v)?);
        }
        Some(key)
    }
}

impl IndexDef {
    /// The entry RowKey prefix for leading columns equal to `eq` and a
    /// next column, of type text, that starts with `text` (`LIKE 'text%'`):
    /// a text component is the hex of its bytes, so those values' entries
    /// share one prefix. `None` when that column is not text.
    pub fn lookup_text_prefix(&self, table: &TableDef, eq: &[Value], text: &str) -> Option<String> {
        let mut key = self.lookup_prefix(table, eq)?;
        let col = self.columns.get(eq.len())?;
        let ty = table.columns.iter().find(|d| &d.name == col)?.ty;
        if ty != SqlType::Text {
            return None;
        }
        key.push('v');
        hex(&mut key, text.as_bytes());
        Some(key)
    }

    /// The entry RowKeys whose leading columns equal `eq` and whose next
    /// column lies between `lo` and `hi` (each `(value, inclusive)`; `None`:
    /// unbounded, NULL never included). `None` when a value is not one its
    /// column can hold.
    pub fn lookup_range(
        &self,
        table: &TableDef,
        eq: &[Value],
        lo: Option<(&Value, bool)>,
        hi: Option<(&Value, bool)>,
    ) -> Option<KeyInterval> {
        let base = self.lookup_prefix(table, eq)?;
        let col = self.columns.get(eq.len())?;
        let ty = table.columns.iter().find(|d| &d.name == col)?.ty;
        let at = |v: &Value| -> Option<String> {
            let mut k = base.clone();
            component(&mut k, &normalize(ty, v)?);
            Some(k)
        };
        // After every key that starts with `k`.
        let past = |k: &str| match KeyInterval::prefix(k).hi {
            Bound::Excluded(next) => Bound::Included(next),
            other => other,
        };
        let lo = match lo {
            None => Bound::Included(format!("{base}v")),
            Some((v, true)) => Bound::Included(at(v)?),
            Some((v, false)) => past(&at(v)?),
        };
        let hi = match hi {
            // Values start with 'v', NULLs with '~': 'w' is past every value.
            None => Bound::Excluded(format!("{base}w")),
            Some((v, true)) => match past(&at(v)?) {
                Bound::Included(k) => Bound::Excluded(k),
                other => other,
            },
            Some((v, false)) => Bound::Excluded(at(v)?),
        };
        Some(KeyInterval { lo, hi })
    }
}

/// `v` as a value of a column of type `ty` is stored, for an index lookup:
/// numbers compare across EDM types in SQL, entries are encoded by value.
fn normalize(ty: SqlType, v: &Value) -> Option<Value> {
    Some(match (ty, v) {
        (SqlType::Float8, Value::Int32(i)) => Value::Double(f64::from(*i)),
        // An integer a double cannot hold exactly compares (in the filter)
        // with no double's entry: no lookup for it.
        (SqlType::Float8, Value::Int64(i)) if i.unsigned_abs() <= 1 << 53 => {
            Value::Double(*i as f64)
        }
        (SqlType::Int2 | SqlType::Int4 | SqlType::Int8, Value::Double(d))
            if d.fract() == 0.0 && d.abs() < 9.2e18 =>
        {
            Value::Int64(*d as i64)
        }
        (_, v) if v.edm_type() == ty.edm() => v.clone(),
        (SqlType::Int2 | SqlType::Int4 | SqlType::Int8, Value::Int32(_) | Value::Int64(_)) => {
            v.clone()
        }
        _ => return None,
    })
}

/// Appends one value's component: `v`, an order-preserving body, `!`.
fn component(key: &mut String, v: &Value) {
    key.push('v');
    let sortable = |x: i64| (x as u64) ^ (1 << 63);
    match v {
        Value::String(s) => hex(key, s.as_bytes()),
        Value::Binary(b) => hex(key, b),
        Value::Guid(g) => hex(key, g),
        Value::Int32(i) => {
            let _ = write!(key, "{:016x}", sortable(i64::from(*i)));
        }
        Value::Int64(i) => {
            let _ = write!(key, "{:016x}", sortable(*i));
        }
        Value::DateTime(t) => {
            let _ = write!(key, "{:016x}", sortable(t.0));
        }
        Value::Boolean(b) => key.push(if *b { '1' } else { '0' }),
        Value::Double(d) => {
            // -0 equals 0 and every NaN equals every NaN in SQL.
            let d = if *d == 0.0 {
                0.0
            } else if d.is_nan() {
                f64::NAN
            } else {
                *d
            };
            let bits = d.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            let _ = write!(key, "{ordered:016x}");
        }
    }
    key.push('!');
}

fn hex(key: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(key, "{b:02x}");
    }
}

/// The entries of every local index of `table` for a base entity with
/// these properties, in index order.
pub fn entries(
    table: &TableDef,
    props: &BTreeMap<String, Value>,
    base_rk: &str,
) -> Result<Vec<Entry>> {
    table
        .indexes
        .iter()
        .enumerate()
        .filter(|(_, def)| !def.global)
        .map(|(index, def)| def.entry(index, table, props, base_rk))
        .collect()
}

/// The RowKeys of base entities: everything below the first index entry.
pub fn user_rows() -> KeyInterval {
    KeyInterval {
        lo: Bound::Unbounded,
        hi: Bound::Excluded(INDEX_ROW_PREFIX.to_string()),
    }
}

/// `spans` without index and queue entries (kept even with no index
/// left: a dropped index's entries may still be on their way out).
pub fn clip_to_user_rows(_table: &TableDef, spans: &[KeyBox]) -> Vec<KeyBox> {
    let user = user_rows();
    spans
        .iter()
        .map(|b| KeyBox {
            pk: b.pk.clone(),
            rk: b.rk.intersect(&user),
        })
        .filter(|b| !b.rk.is_empty())
        .collect()
}

/// A base entity's RowKey may not begin with the index entries' prefix.
pub fn check_base_row_key(table: &str, rk: &str) -> Result<()> {
    if rk.starts_with(INDEX_ROW_PREFIX) {
        return Err(CatalogError::ReservedRowKey {
            table: table.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Column;

    fn table() -> TableDef {
        let mut t = TableDef::new(
            "runners",
            vec![
                Column::key("race"),
                Column::key("bib"),
                Column::property("age", SqlType::Int4),
                Column::property("name", SqlType::Text),
                Column::property("pace", SqlType::Float8),
            ],
            &["race".into(), "bib".into()],
        )
        .unwrap();
        t.indexes.push(IndexDef {
            name: "by_age".into(),
            id: 1,
            columns: vec!["age".into(), "name".into()],
            unique: false,
            building: false,
            global: false,
            include: Vec::new(),
        });
        t
    }

    fn props(age: Option<i32>, name: &str) -> BTreeMap<String, Value> {
        let mut p = BTreeMap::new();
        if let Some(a) = age {
            p.insert("age".into(), Value::Int32(a));
        }
        p.insert("name".into(), Value::String(name.into()));
        p
    }

    #[test]
    fn entries_sort_by_value_then_base_key_and_nulls_last() {
        let t = table();
        let ix = &t.indexes[0];
        let k = |age, name, rk| ix.entry_key(&t, &props(age, name), rk).unwrap();
        let mut keys = vec![
            k(Some(40), "a", "1"),
            k(None, "a", "2"),
            k(Some(-3), "zz", "3"),
            k(Some(7), "b", "4"),
            k(Some(7), "ab", "5"),
            k(Some(7), "a", "6"),
        ];
        keys.sort();
        let order: Vec<char> = keys.iter().map(|k| k.chars().last().unwrap()).collect();
        assert_eq!(order, vec!['3', '6', '5', '4', '1', '2']);
        assert!(keys.iter().all(|k| k.starts_with(&ix.prefix())));
        // Above every base RowKey, and valid RowKeys themselves.
        assert!(keys.iter().all(|k| !user_rows().contains(k)));
        assert!(user_rows().contains("\u{10FFFE}zzz"));
        for k in &keys {
            limits::check_key(tablegate_store::KeyKind::RowKey, k).unwrap();
        }
    }

    #[test]
    fn a_lookup_prefix_matches_exactly_the_equal_values() {
        let t = table();
        let ix = &t.indexes[0];
        let p = ix.lookup_prefix(&t, &[Value::Int64(7)]).unwrap();
        let seven = ix.entry_key(&t, &props(Some(7), "x"), "9").unwrap();
        let seventy = ix.entry_key(&t, &props(Some(70), "x"), "9").unwrap();
        assert!(seven.starts_with(&p));
        assert!(!seventy.starts_with(&p));
        // Text prefixes do not run into longer values.
        let pa = ix
            .lookup_prefix(&t, &[Value::Int32(7), Value::String("a".into())])
            .unwrap();
        assert!(
            !ix.entry_key(&t, &props(Some(7), "ab"), "1")
                .unwrap()
                .starts_with(&pa)
        );
        assert!(
            ix.entry_key(&t, &props(Some(7), "a"), "1")
                .unwrap()
                .starts_with(&pa)
        );
        // 7.5 is no integer: nothing matches.
        assert_eq!(ix.lookup_prefix(&t, &[Value::Double(7.5)]), None);
        // A double column looked up by an integer: only one a double holds
        // exactly.
        let mut by_pace = ix.clone();
        by_pace.columns = vec!["pace".into()];
        assert!(
            by_pace
                .lookup_prefix(&t, &[Value::Int64(1 << 53)])
                .is_some()
        );
        assert_eq!(
            by_pace.lookup_prefix(&t, &[Value::Int64((1 << 53) + 1)]),
            None
        );
    }

    #[test]
    fn a_lookup_range_holds_exactly_the_values_between_its_bounds() {
        let t = table();
        let ix = &t.indexes[0];
        let key = |age: Option<i32>, name: &str| ix.entry_key(&t, &props(age, name), "r").unwrap();
        let ages = [None, Some(-5), Some(6), Some(7), Some(8), Some(70)];
        let v = |n: i64| Value::Int64(n);
        type Bound = Option<(Value, bool)>;
        let cases: Vec<(Bound, Bound, Vec<i32>)> = vec![
            (Some((v(7), true)), Some((v(8), true)), vec![7, 8]),
            (Some((v(7), false)), Some((v(8), true)), vec![8]),
            (Some((v(6), true)), Some((v(8), false)), vec![6, 7]),
            (None, Some((v(7), false)), vec![-5, 6]),
            (Some((v(8), false)), None, vec![70]),
            (None, None, vec![-5, 6, 7, 8, 70]),
        ];
        for (lo, hi, want) in cases {
            let r = ix
                .lookup_range(
                    &t,
                    &[],
                    lo.as_ref().map(|(v, i)| (v, *i)),
                    hi.as_ref().map(|(v, i)| (v, *i)),
                )
                .unwrap();
            let got: Vec<i32> = ages
                .iter()
                .filter(|a| r.contains(&key(**a, "zz")) && r.contains(&key(**a, "")))
                .map(|a| a.expect("NULL is never in a range"))
                .collect();
            assert_eq!(got, want, "{lo:?}..{hi:?}");
        }
        // After an equality on the first column, a range on the second.
        let r = ix
            .lookup_range(&t, &[v(7)], Some((&Value::String("b".into()), true)), None)
            .unwrap();
        assert!(r.contains(&key(Some(7), "b")) && r.contains(&key(Some(7), "bz")));
        assert!(!r.contains(&key(Some(7), "a")) && !r.contains(&key(Some(8), "b")));
        assert!(!r.contains(&key(Some(7), "\u{0}")));
    }

    #[test]
    fn doubles_sort_numerically_and_minus_zero_is_zero() {
        let mut keys: Vec<(String, f64)> = [-1e300, -2.5, -0.0, 0.0, 1e-9, 3.0, f64::INFINITY]
            .iter()
            .map(|d| {
                let mut k = String::new();
                component(&mut k, &Value::Double(*d));
                (k, *d)
            })
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        let sorted: Vec<f64> = keys.iter().map(|k| k.1).collect();
        assert!(sorted.windows(2).all(|w| w[0] <= w[1]), "{sorted:?}");
        assert_eq!(keys[2].0, keys[3].0, "-0 and 0 share an entry");
    }

    #[test]
    fn unique_entries_end_at_the_value_unless_null() {
        let mut t = table();
        t.indexes[0].unique = true;
        let ix = &t.indexes[0];
        let a = ix.entry_key(&t, &props(Some(1), "x"), "r1").unwrap();
        let b = ix.entry_key(&t, &props(Some(1), "x"), "r2").unwrap();
        assert_eq!(a, b);
        let n1 = ix.entry_key(&t, &props(None, "x"), "r1").unwrap();
        let n2 = ix.entry_key(&t, &props(None, "x"), "r2").unwrap();
        assert_ne!(n1, n2);
    }

    #[test]
    fn over_long_values_are_refused_by_name() {
        let t = table();
        let long = "é".repeat(600);
        let e = t.indexes[0]
            .entry_key(&t, &props(Some(1), &long), "r")
            .unwrap_err();
        assert!(e.to_string().contains("by_age"), "{e}");
    }
}
