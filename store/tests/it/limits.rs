//! Every documented limit and every error it produces, through the
//! public API: exactly at the limit is accepted, one over is rejected with
//! the exact [`StoreError`] variant and fields.
//!
//! Single writes are entity-group transactions of one, so a per-operation
//! failure arrives as `BatchOperationFailed { index: 0, .. }`; tests check
//! the index and look through it with [`StoreError::root`].

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use tablegate_store::limits;
use tablegate_store::*;

const T: &str = "limits";
const MIB: usize = 1024 * 1024;

/// Expects `res` to fail with an error matching `pat`.
macro_rules! assert_err {
    ($res:expr, $pat:pat $(if $guard:expr)?) => {{
        let err = $res.expect_err("expected an error");
        assert!(
            matches!(&err, $pat $(if $guard)?),
            "unexpected error: {err:?}"
        );
    }};
}

/// Expects `res` to fail as operation `index` of an entity-group transaction
/// (`BatchOperationFailed`), with a root error matching `pat`.
macro_rules! assert_op_err {
    ($res:expr, $index:expr, $pat:pat $(if $guard:expr)?) => {{
        let err = $res.expect_err("expected the batch to fail");
        match &err {
            StoreError::BatchOperationFailed { index, .. } => {
                assert_eq!(*index, $index, "wrong operation index in {err:?}")
            }
            other => panic!("expected BatchOperationFailed, got {other:?}"),
        }
        assert!(
            matches!(err.root(), $pat $(if $guard)?),
            "unexpected root error: {err:?}"
        );
    }};
}

// ---- helpers ----------------------------------------------------------------

fn store() -> LocalStore {
    let s = LocalStore::in_memory();
    s.create_table_blocking(T).unwrap();
    s
}

fn insert(s: &LocalStore, w: EntityWrite) -> Result<Vec<OpOutcome>> {
    s.execute_blocking(T, &[Operation::Insert(w)])
}

/// Inserts `w`, reads it back and checks it came back as written.
fn insert_ok(s: &LocalStore, w: EntityWrite) -> Entity {
    let op = Operation::Insert(w.clone());
    let out = insert(s, w.clone()).unwrap_or_else(|e| panic!("insert rejected: {e}"));
    let got = s
        .get_blocking(T, &w.partition_key, &w.row_key)
        .unwrap()
        .expect("inserted entity is readable");
    assert_eq!(out[0].entity(&op).as_ref(), Some(&got));
    let expected: BTreeMap<String, Value> = w
        .properties
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
        .collect();
    assert_eq!(got.properties, expected);
    got
}

fn get(s: &LocalStore, pk: &str, rk: &str) -> Option<Entity> {
    s.get_blocking(T, pk, rk).unwrap()
}

/// Every entity of table `T`, all pages.
fn scan_all(s: &LocalStore) -> Vec<Entity> {
    let q = Query::full_scan();
    let mut req = PageRequest::first(limits::MAX_PAGE_SIZE);
    let mut out = Vec::new();
    loop {
        let page = s.query_blocking(T, &q, &req).unwrap();
        out.extend(page.entities);
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return out,
        }
    }
}

fn bin(n: usize) -> Value {
    Value::Binary(vec![0xA5; n])
}

fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// The documented entity size formula, written out independently of the crate.
fn hand_value_size(v: &Value) -> usize {
    match v {
        Value::String(s) => 2 * units(s) + 4,
        Value::DateTime(_) => 8,
        Value::Guid(_) => 16,
        Value::Double(_) => 8,
        Value::Int32(_) => 4,
        Value::Int64(_) => 8,
        Value::Boolean(_) => 1,
        Value::Binary(b) => b.len() + 4,
    }
}

fn hand_size<'a>(
    pk: &str,
    rk: &str,
    props: impl Iterator<Item = (&'a String, &'a Value)>,
) -> usize {
    4 + 2 * (units(pk) + units(rk))
        + props
            .map(|(n, v)| 8 + 2 * units(n) + hand_value_size(v))
            .sum::<usize>()
}

fn hand_write_size(w: &EntityWrite) -> usize {
    hand_size(
        &w.partition_key,
        &w.row_key,
        w.properties
            .iter()
            .filter_map(|(n, v)| v.as_ref().map(|v| (n, v))),
    )
}

/// Adds Binary properties `pad00`, `pad01`, ... (each counting
/// `8 + 2·5 + len + 4 = len + 22` bytes) until the entity's formula size is
/// exactly `target`.
fn pad_to(mut w: EntityWrite, target: usize) -> EntityWrite {
    const OVERHEAD: usize = 8 + 2 * 5 + 4;
    let mut rem = target
        .checked_sub(hand_write_size(&w))
        .expect("target below the entity's size");
    let mut i = 0;
    while rem > 0 {
        assert!(rem >= OVERHEAD, "cannot pad by {rem} bytes");
        let mut take = rem.min(OVERHEAD + limits::MAX_BINARY_BYTES);
        if rem - take > 0 && rem - take < OVERHEAD {
            take -= OVERHEAD;
        }
        w = w.with(format!("pad{i:02}"), bin(take - OVERHEAD));
        rem -= take;
        i += 1;
    }
    assert_eq!(hand_write_size(&w), target);
    w
}

// ---- constants ----------------------------------------------------------------

#[test]
fn documented_limit_values() {
    assert_eq!(limits::MAX_KEY_UTF16, 512);
    assert_eq!(limits::MAX_PROPERTIES, 252);
    assert_eq!(limits::MAX_PROPERTY_NAME_CHARS, 255);
    assert_eq!(limits::MAX_STRING_BYTES, 65_536);
    assert_eq!(limits::MAX_BINARY_BYTES, 65_536);
    assert_eq!(limits::MAX_ENTITY_BYTES, 1_048_576);
    assert_eq!(limits::MAX_BATCH_OPERATIONS, 100);
    assert_eq!(limits::MAX_BATCH_BYTES, 4_194_304);
    assert_eq!(limits::MAX_PAGE_SIZE, 1000);
    assert_eq!(limits::TABLE_NAME_LEN, 3..=63);
    assert_eq!(*limits::DATETIME_RANGE.start(), DateTime::MIN);
    assert_eq!(*limits::DATETIME_RANGE.end(), DateTime::MAX);
}

// ---- keys -------------------------------------------------------------------

#[test]
fn key_length_512_units_accepted_513_rejected() {
    let s = store();
    let k512 = "k".repeat(512);
    let k513 = "k".repeat(513);
    insert_ok(&s, EntityWrite::new(k512.clone(), "r"));
    insert_ok(&s, EntityWrite::new("p", k512.clone()));
    insert_ok(&s, EntityWrite::new(k512.clone(), k512.clone()));

    assert_op_err!(
        insert(&s, EntityWrite::new(k513.clone(), "r")),
        0,
        StoreError::KeyTooLong {
            kind: KeyKind::PartitionKey,
            units: 513,
            limit: 512
        }
    );
    assert_op_err!(
        insert(&s, EntityWrite::new("p", k513.clone())),
        0,
        StoreError::KeyTooLong {
            kind: KeyKind::RowKey,
            units: 513,
            limit: 512
        }
    );
    // Delete validates its keys too.
    assert_op_err!(
        s.execute_blocking(
            T,
            &[Operation::Delete {
                partition_key: "p".into(),
                row_key: k513.clone(),
                if_match: IfMatch::Any,
            }]
        ),
        0,
        StoreError::KeyTooLong {
            kind: KeyKind::RowKey,
            units: 513,
            limit: 512
        }
    );
    assert_eq!(scan_all(&s).len(), 3);

    // The check functions directly.
    limits::check_key(KeyKind::PartitionKey, &k512).unwrap();
    assert_err!(
        limits::check_key(KeyKind::RowKey, &k513),
        StoreError::KeyTooLong {
            kind: KeyKind::RowKey,
            units: 513,
            limit: 512
        }
    );
}

#[test]
fn key_length_counts_utf16_units_surrogate_pairs_twice() {
    let s = store();
    // U+1F600 is 4 bytes of UTF-8 and 2 UTF-16 code units.
    let smileys = "\u{1F600}".repeat(256);
    assert_eq!(units(&smileys), 512);
    let over = format!("{smileys}a");
    // A BMP non-ASCII char (2 UTF-8 bytes) is one unit: 512 of them fit.
    let bmp = "é".repeat(512);

    insert_ok(&s, EntityWrite::new(smileys.clone(), smileys.clone()));
    insert_ok(&s, EntityWrite::new(bmp.clone(), bmp.clone()));
    assert_op_err!(
        insert(&s, EntityWrite::new(over.clone(), "r")),
        0,
        StoreError::KeyTooLong {
            kind: KeyKind::PartitionKey,
            units: 513,
            limit: 512
        }
    );
    assert_op_err!(
        insert(&s, EntityWrite::new("p", over.clone())),
        0,
        StoreError::KeyTooLong {
            kind: KeyKind::RowKey,
            units: 513,
            limit: 512
        }
    );
    limits::check_key(KeyKind::PartitionKey, &smileys).unwrap();
    assert_err!(
        limits::check_key(KeyKind::PartitionKey, &over),
        StoreError::KeyTooLong { units: 513, .. }
    );
}

#[test]
fn empty_keys_accepted() {
    let s = store();
    insert_ok(&s, EntityWrite::new("", ""));
    insert_ok(&s, EntityWrite::new("", "r"));
    insert_ok(&s, EntityWrite::new("p", ""));
    limits::check_key(KeyKind::PartitionKey, "").unwrap();
    limits::check_key(KeyKind::RowKey, "").unwrap();
    // Ordinal order: ("", "") < ("", "r") < ("p", "").
    let keys: Vec<_> = scan_all(&s)
        .into_iter()
        .map(|e| (e.partition_key, e.row_key))
        .collect();
    assert_eq!(
        keys,
        [
            (String::new(), String::new()),
            (String::new(), "r".into()),
            ("p".into(), String::new())
        ]
    );
}

const FORBIDDEN: [char; 8] = ['/', '\\', '#', '?', '\u{0}', '\u{1F}', '\u{7F}', '\u{9F}'];

#[test]
fn each_forbidden_key_character_rejected() {
    let s = store();
    for c in FORBIDDEN {
        let bad = format!("ab{c}d");
        assert_op_err!(
            insert(&s, EntityWrite::new(bad.clone(), "r")),
            0,
            StoreError::ForbiddenKeyCharacter {
                kind: KeyKind::PartitionKey,
                ch,
                position: 2
            } if *ch == c
        );
        assert_op_err!(
            insert(&s, EntityWrite::new("p", bad.clone())),
            0,
            StoreError::ForbiddenKeyCharacter {
                kind: KeyKind::RowKey,
                ch,
                position: 2
            } if *ch == c
        );
        // At the very start and very end too.
        assert_op_err!(
            insert(&s, EntityWrite::new(format!("{c}x"), "r")),
            0,
            StoreError::ForbiddenKeyCharacter {
                kind: KeyKind::PartitionKey,
                ch,
                position: 0
            } if *ch == c
        );
        assert_op_err!(
            s.execute_blocking(
                T,
                &[Operation::InsertOrReplace(EntityWrite::new(
                    "p",
                    format!("xyz{c}")
                ))]
            ),
            0,
            StoreError::ForbiddenKeyCharacter {
                kind: KeyKind::RowKey,
                ch,
                position: 3
            } if *ch == c
        );
        assert_err!(
            limits::check_key(KeyKind::RowKey, &bad),
            StoreError::ForbiddenKeyCharacter {
                kind: KeyKind::RowKey,
                ch,
                position: 2
            } if *ch == c
        );
        assert!(limits::is_forbidden_key_char(c), "{c:?}");
        // Told counting from 1, as PostgreSQL counts positions.
        let message = limits::check_key(KeyKind::RowKey, &bad)
            .unwrap_err()
            .to_string();
        assert!(message.ends_with("at character 3"), "{message}");
    }
    assert!(scan_all(&s).is_empty());
}

#[test]
fn forbidden_key_character_position_counts_characters() {
    // 'é' is 2 UTF-8 bytes, U+1F600 is 4 bytes and 2 UTF-16 units; the
    // position is in characters.
    assert_err!(
        limits::check_key(KeyKind::PartitionKey, "é\u{1F600}/"),
        StoreError::ForbiddenKeyCharacter {
            kind: KeyKind::PartitionKey,
            ch: '/',
            position: 2
        }
    );
}

#[test]
fn forbidden_key_character_ranges_exact() {
    for cp in 0u32..=0x2FFFF {
        let Some(c) = char::from_u32(cp) else {
            continue;
        };
        let expected = matches!(cp, 0x00..=0x1F | 0x7F..=0x9F) || "/\\#?".contains(c);
        assert_eq!(limits::is_forbidden_key_char(c), expected, "U+{cp:04X}");
    }
}

#[test]
fn neighbours_of_forbidden_characters_accepted() {
    let s = store();
    for c in ['\u{20}', '\u{7E}', '\u{A0}'] {
        let k = format!("a{c}b");
        insert_ok(&s, EntityWrite::new(k.clone(), k.clone()));
        limits::check_key(KeyKind::PartitionKey, &k).unwrap();
        assert!(!limits::is_forbidden_key_char(c));
    }
    // Characters next to '/' '\' '#' '?' in ASCII.
    for c in ['.', '0', '[', ']', '"', '$', '>', '@'] {
        insert_ok(&s, EntityWrite::new(format!("p{c}"), format!("r{c}")));
    }
}

// ---- property count ----------------------------------------------------------

fn with_props(mut w: EntityWrite, names: impl Iterator<Item = String>) -> EntityWrite {
    for (i, n) in names.enumerate() {
        w = w.with(n, Value::Int32(i as i32));
    }
    w
}

fn prop_names(range: std::ops::Range<usize>) -> impl Iterator<Item = String> {
    range.map(|i| format!("p{i:03}"))
}

#[test]
fn property_count_252_accepted_253_rejected() {
    let s = store();
    let e = insert_ok(
        &s,
        with_props(EntityWrite::new("p", "ok"), prop_names(0..252)),
    );
    assert_eq!(e.properties.len(), 252);

    assert_op_err!(
        insert(
            &s,
            with_props(EntityWrite::new("p", "over"), prop_names(0..253))
        ),
        0,
        StoreError::TooManyProperties {
            count: 253,
            limit: 252
        }
    );
    assert_eq!(get(&s, "p", "over"), None);
    // InsertOrReplace on an existing entity is checked the same way.
    assert_op_err!(
        s.execute_blocking(
            T,
            &[Operation::InsertOrReplace(with_props(
                EntityWrite::new("p", "ok"),
                prop_names(0..253)
            ))]
        ),
        0,
        StoreError::TooManyProperties {
            count: 253,
            limit: 252
        }
    );
    assert_eq!(get(&s, "p", "ok"), Some(e));
}

#[test]
fn null_properties_are_not_stored_and_do_not_count() {
    let s = store();
    let mut w = with_props(EntityWrite::new("p", "r"), prop_names(0..252));
    for i in 0..20 {
        w = w.with_null(format!("null{i}"));
    }
    assert_eq!(w.properties.len(), 272);
    // The formula counts only non-NULL properties.
    assert_eq!(w.size_in_formula(), hand_write_size(&w));
    let e = insert_ok(&s, w);
    assert_eq!(e.properties.len(), 252);
    assert!(e.properties.keys().all(|k| !k.starts_with("null")));
}

#[test]
fn merge_over_252_properties_rejected() {
    let s = store();
    let before = insert_ok(
        &s,
        with_props(EntityWrite::new("p", "r"), prop_names(0..252)),
    );
    let merge = |w: EntityWrite| Operation::Merge {
        entity: w,
        if_match: IfMatch::Any,
    };

    // One new property on top of 252 existing ones.
    assert_op_err!(
        s.execute_blocking(
            T,
            &[merge(
                EntityWrite::new("p", "r").with("extra", Value::Boolean(true))
            )]
        ),
        0,
        StoreError::TooManyProperties {
            count: 253,
            limit: 252
        }
    );
    assert_op_err!(
        s.execute_blocking(
            T,
            &[Operation::InsertOrMerge(
                EntityWrite::new("p", "r").with("extra", Value::Boolean(true))
            )]
        ),
        0,
        StoreError::TooManyProperties {
            count: 253,
            limit: 252
        }
    );
    assert_eq!(get(&s, "p", "r").as_ref(), Some(&before), "unchanged");

    // Updating existing properties keeps the count at 252; removing one (NULL)
    // makes room for a new one.
    s.execute_blocking(
        T,
        &[merge(
            EntityWrite::new("p", "r").with("p000", Value::Int64(7)),
        )],
    )
    .unwrap();
    s.execute_blocking(
        T,
        &[merge(
            EntityWrite::new("p", "r")
                .with_null("p001")
                .with("extra", Value::Boolean(true)),
        )],
    )
    .unwrap();
    let after = get(&s, "p", "r").unwrap();
    assert_eq!(after.properties.len(), 252);
    assert_eq!(after.properties["p000"], Value::Int64(7));
    assert!(!after.properties.contains_key("p001"));
    assert_eq!(after.properties["extra"], Value::Boolean(true));
}

#[test]
fn check_entity_counts_properties() {
    let mk = |n: usize| Entity {
        partition_key: "p".into(),
        row_key: "r".into(),
        timestamp: DateTime(0),
        etag: None,
        properties: prop_names(0..n)
            .map(|k| (k, Value::Boolean(true)))
            .collect(),
    };
    limits::check_entity(&mk(252)).unwrap();
    assert_err!(
        limits::check_entity(&mk(253)),
        StoreError::TooManyProperties {
            count: 253,
            limit: 252
        }
    );
}

// ---- property names ----------------------------------------------------------

#[test]
fn property_name_255_chars_accepted_256_rejected() {
    let s = store();
    let n255 = "n".repeat(255);
    let n256 = "n".repeat(256);
    // Characters, not bytes: 255 two-byte letters are fine.
    let e255 = "é".repeat(255);
    insert_ok(
        &s,
        EntityWrite::new("p", "ok")
            .with(n255.clone(), Value::Int32(1))
            .with(e255.clone(), Value::Int32(2)),
    );
    limits::check_property_name(&n255).unwrap();
    limits::check_property_name(&e255).unwrap();

    for long in [n256, "é".repeat(256)] {
        assert_op_err!(
            insert(&s, EntityWrite::new("p", "bad").with(long.clone(), Value::Int32(1))),
            0,
            StoreError::InvalidPropertyName { name, .. } if long.starts_with(name.as_str())
        );
        // A NULL value does not excuse a bad name.
        assert_op_err!(
            insert(&s, EntityWrite::new("p", "bad").with_null(long.clone())),
            0,
            StoreError::InvalidPropertyName { .. }
        );
        assert_err!(
            limits::check_property_name(&long),
            StoreError::InvalidPropertyName { .. }
        );
    }
    assert_eq!(get(&s, "p", "bad"), None);
}

#[test]
fn property_name_identifier_rules() {
    let s = store();
    for good in ["a", "_", "_x", "A1", "a_1_b", "Straße", "日本", "x9"] {
        insert_ok(&s, EntityWrite::new("p", good).with(good, Value::Int32(1)));
        limits::check_property_name(good).unwrap();
    }
    for bad in [
        "", "1a", "9", "-a", "$a", " a", "a-b", "a b", "a.b", "a$", "a/b", "a\u{0}",
    ] {
        assert_op_err!(
            insert(&s, EntityWrite::new("p", "bad").with(bad, Value::Int32(1))),
            0,
            StoreError::InvalidPropertyName { name, .. } if name == bad
        );
        assert_err!(
            limits::check_property_name(bad),
            StoreError::InvalidPropertyName { name, .. } if name == bad
        );
    }
    assert_eq!(get(&s, "p", "bad"), None);
}

#[test]
fn reserved_property_names_rejected_in_any_case() {
    let s = store();
    for reserved in [
        "PartitionKey",
        "partitionkey",
        "PARTITIONKEY",
        "RowKey",
        "rowKEY",
        "Timestamp",
        "timestamp",
        "TimeStamp",
    ] {
        for op in [
            Operation::Insert(EntityWrite::new("p", "r").with(reserved, Value::Int32(1))),
            Operation::InsertOrReplace(
                EntityWrite::new("p", "r").with(reserved, Value::String("x".into())),
            ),
            Operation::InsertOrMerge(EntityWrite::new("p", "r").with_null(reserved)),
        ] {
            assert_op_err!(
                s.execute_blocking(T, &[op]),
                0,
                StoreError::InvalidPropertyName { name, .. } if name == reserved
            );
        }
        assert_err!(
            limits::check_property_name(reserved),
            StoreError::InvalidPropertyName { .. }
        );
    }
    // Names that merely contain a reserved word are ordinary.
    for ok in ["PartitionKey2", "MyRowKey", "Timestamps", "_Timestamp"] {
        limits::check_property_name(ok).unwrap();
    }
    assert_eq!(get(&s, "p", "r"), None);
}

// ---- value sizes ---------------------------------------------------------------

#[test]
fn string_value_32768_units_accepted_32769_rejected() {
    let s = store();
    let ascii = "s".repeat(32_768);
    let smileys = "\u{1F600}".repeat(16_384);
    assert_eq!(units(&smileys), 32_768);
    insert_ok(
        &s,
        EntityWrite::new("p", "ascii").with("s", Value::String(ascii.clone())),
    );
    insert_ok(
        &s,
        EntityWrite::new("p", "smileys").with("s", Value::String(smileys.clone())),
    );
    limits::check_value("s", &Value::String(ascii.clone())).unwrap();

    for over in [format!("{ascii}s"), format!("{smileys}s")] {
        assert_op_err!(
            insert(&s, EntityWrite::new("p", "over").with("s", Value::String(over.clone()))),
            0,
            StoreError::ValueTooLarge {
                property,
                edm: "Edm.String",
                size: 65_538,
                limit: 65_536
            } if property == "s"
        );
        assert_err!(
            limits::check_value("col", &Value::String(over)),
            StoreError::ValueTooLarge {
                property,
                edm: "Edm.String",
                size: 65_538,
                limit: 65_536
            } if property == "col"
        );
    }
    // Merge is checked the same way.
    assert_op_err!(
        s.execute_blocking(
            T,
            &[Operation::Merge {
                entity: EntityWrite::new("p", "ascii")
                    .with("s", Value::String(format!("{ascii}s"))),
                if_match: IfMatch::Any,
            }]
        ),
        0,
        StoreError::ValueTooLarge { size: 65_538, .. }
    );
    assert_eq!(get(&s, "p", "over"), None);
}

#[test]
fn binary_value_65536_bytes_accepted_65537_rejected() {
    let s = store();
    insert_ok(&s, EntityWrite::new("p", "ok").with("b", bin(65_536)));
    limits::check_value("b", &bin(65_536)).unwrap();
    assert_op_err!(
        insert(&s, EntityWrite::new("p", "over").with("b", bin(65_537))),
        0,
        StoreError::ValueTooLarge {
            property,
            edm: "Edm.Binary",
            size: 65_537,
            limit: 65_536
        } if property == "b"
    );
    assert_err!(
        limits::check_value("b", &bin(65_537)),
        StoreError::ValueTooLarge {
            edm: "Edm.Binary",
            size: 65_537,
            ..
        }
    );
    assert_eq!(get(&s, "p", "over"), None);
}

#[test]
fn datetime_min_max_accepted_one_microsecond_outside_rejected() {
    let s = store();
    let e = insert_ok(
        &s,
        EntityWrite::new("p", "ok")
            .with("lo", Value::DateTime(DateTime::MIN))
            .with("hi", Value::DateTime(DateTime::MAX)),
    );
    assert_eq!(e.properties["lo"], Value::DateTime(DateTime::MIN));
    assert_eq!(e.properties["hi"], Value::DateTime(DateTime::MAX));
    limits::check_value("d", &Value::DateTime(DateTime::MIN)).unwrap();
    limits::check_value("d", &Value::DateTime(DateTime::MAX)).unwrap();

    for micros in [DateTime::MIN.0 - 1, DateTime::MAX.0 + 1, i64::MIN, i64::MAX] {
        assert_op_err!(
            insert(&s, EntityWrite::new("p", "bad").with("d", Value::DateTime(DateTime(micros)))),
            0,
            StoreError::DateTimeOutOfRange { property, micros: m } if property == "d" && *m == micros
        );
        assert_err!(
            limits::check_value("d", &Value::DateTime(DateTime(micros))),
            StoreError::DateTimeOutOfRange { micros: m, .. } if *m == micros
        );
    }
    assert_eq!(get(&s, "p", "bad"), None);
}

#[test]
fn doubles_allow_nan_and_infinities() {
    let s = store();
    let e = insert_ok(
        &s,
        EntityWrite::new("p", "r")
            .with("nan", Value::Double(f64::NAN))
            .with("inf", Value::Double(f64::INFINITY))
            .with("ninf", Value::Double(f64::NEG_INFINITY)),
    );
    assert!(matches!(e.properties["nan"], Value::Double(d) if d.is_nan()));
}

// ---- entity size ------------------------------------------------------------------

#[test]
fn entity_size_formula_by_hand() {
    // Every EDM type once, keys with a surrogate pair, plus a NULL.
    let w = EntityWrite::new("pk\u{1F600}", "")
        .with("s", Value::String("héllo\u{1F600}".into())) // 8 + 2 + (2·7 + 4) = 28
        .with("dt", Value::DateTime(DateTime(0))) // 8 + 4 + 8 = 20
        .with("g", Value::Guid([7; 16])) // 8 + 2 + 16 = 26
        .with("d", Value::Double(1.5)) // 8 + 2 + 8 = 18
        .with("i", Value::Int32(-1)) // 8 + 2 + 4 = 14
        .with("l", Value::Int64(1 << 40)) // 8 + 2 + 8 = 18
        .with("b", Value::Boolean(false)) // 8 + 2 + 1 = 11
        .with("n", Value::Binary(vec![1, 2, 3])) // 8 + 2 + 7 = 17
        .with_null("z"); // not counted
    // 4 + 2·(4 + 0) = 12; properties 152.
    const HAND: usize = 12 + 28 + 20 + 26 + 18 + 14 + 18 + 11 + 17;
    assert_eq!(HAND, 164);
    assert_eq!(hand_write_size(&w), HAND);
    assert_eq!(w.size_in_formula(), HAND);
    assert_eq!(Operation::Insert(w.clone()).payload_size(), HAND);
    let s = store();
    let e = insert_ok(&s, w);
    assert_eq!(e.size_in_formula(), HAND);
}

#[test]
fn entity_of_exactly_1_mib_accepted_one_byte_more_rejected() {
    let s = store();
    // 4 + 2·(1 + 1) = 8, then 15 × (8 + 2·3 + 65536 + 4) = 983,310, then
    // (8 + 2·3 + 65240 + 4) = 65,258: 8 + 983,310 + 65,258 = 1,048,576.
    let build = |rk: &str, last: usize| {
        let mut w = EntityWrite::new("p", rk);
        for i in 0..15 {
            w = w.with(format!("b{i:02}"), bin(65_536));
        }
        w.with("b15", bin(last))
    };
    const HAND: usize = 8 + 15 * (8 + 2 * 3 + 65_536 + 4) + (8 + 2 * 3 + 65_240 + 4);
    assert_eq!(HAND, MIB);

    let w = build("r", 65_240);
    assert_eq!(w.size_in_formula(), HAND);
    assert_eq!(hand_write_size(&w), HAND);
    let e = insert_ok(&s, w);
    assert_eq!(e.size_in_formula(), HAND);
    assert_eq!(
        hand_size(&e.partition_key, &e.row_key, e.properties.iter()),
        HAND
    );
    limits::check_entity(&e).unwrap();

    assert_op_err!(
        insert(&s, build("s", 65_241)),
        0,
        StoreError::EntityTooLarge {
            partition_key,
            row_key,
            size: 1_048_577,
            limit: 1_048_576
        } if partition_key == "p" && row_key == "s"
    );
    assert_eq!(get(&s, "p", "s"), None);
}

#[test]
fn entity_of_every_type_padded_to_exactly_1_mib() {
    let s = store();
    let base = EntityWrite::new("pk\u{1F600}", "rk\u{1F600}é")
        .with("s", Value::String("héllo\u{1F600}".repeat(100)))
        .with("dt", Value::DateTime(DateTime::MAX))
        .with("g", Value::Guid([7; 16]))
        .with("d", Value::Double(f64::NAN))
        .with("i", Value::Int32(i32::MIN))
        .with("l", Value::Int64(i64::MAX))
        .with("b", Value::Boolean(true))
        .with_null("nothing");
    let exact = pad_to(base.clone(), MIB);
    let e = insert_ok(&s, exact);
    assert_eq!(e.size_in_formula(), MIB);
    assert_eq!(
        hand_size(&e.partition_key, &e.row_key, e.properties.iter()),
        MIB
    );

    let mut over = pad_to(base, MIB + 1);
    over.row_key = "other".into(); // shorter key: re-pad
    let over = pad_to(
        EntityWrite {
            properties: over
                .properties
                .into_iter()
                .filter(|(k, _)| !k.starts_with("pad"))
                .collect(),
            ..over
        },
        MIB + 1,
    );
    assert_op_err!(
        insert(&s, over),
        0,
        StoreError::EntityTooLarge {
            size: 1_048_577,
            limit: 1_048_576,
            ..
        }
    );
    assert_eq!(get(&s, "pk\u{1F600}", "other"), None);
}

#[test]
fn merge_past_1_mib_rejected() {
    let s = store();
    let w = pad_to(EntityWrite::new("p", "r"), MIB);
    let before = insert_ok(&s, w.clone());
    // The last (partial) padding value; the others are at the 64 KiB limit.
    assert_eq!(w.properties.len(), 16);
    // Growing it by a byte, or adding a Boolean, goes over.
    let Some(Some(Value::Binary(b))) = w.properties.get("pad15") else {
        panic!("padding")
    };
    let grown = bin(b.len() + 1);
    for (op, size) in [
        (
            Operation::Merge {
                entity: EntityWrite::new("p", "r").with("pad15", grown.clone()),
                if_match: IfMatch::Any,
            },
            MIB + 1,
        ),
        (
            Operation::InsertOrMerge(EntityWrite::new("p", "r").with("z", Value::Boolean(true))),
            MIB + 8 + 2 + 1,
        ),
    ] {
        assert_op_err!(
            s.execute_blocking(T, &[op]),
            0,
            StoreError::EntityTooLarge { size: got, limit: 1_048_576, .. } if *got == size
        );
    }
    assert_eq!(get(&s, "p", "r").as_ref(), Some(&before));
    // Shrinking another value by a byte first makes room.
    let Some(Some(Value::Binary(b1))) = w.properties.get("pad00") else {
        panic!("padding")
    };
    s.execute_blocking(
        T,
        &[Operation::Merge {
            entity: EntityWrite::new("p", "r")
                .with("pad15", grown)
                .with("pad00", bin(b1.len() - 1)),
            if_match: IfMatch::Any,
        }],
    )
    .unwrap();
    assert_eq!(get(&s, "p", "r").unwrap().size_in_formula(), MIB);
}

// ---- tables ----------------------------------------------------------------------

#[test]
fn table_name_length_3_and_63_accepted_2_and_64_rejected() {
    let s = LocalStore::in_memory();
    let n63 = format!("t{}", "a".repeat(62));
    let n64 = format!("t{}", "a".repeat(63));
    for ok in ["abc", n63.as_str()] {
        assert_eq!(s.create_table_blocking(ok).unwrap().name, ok);
        limits::check_table_name(ok).unwrap();
    }
    for bad in ["ab", n64.as_str(), "", "a"] {
        assert_err!(
            s.create_table_blocking(bad),
            StoreError::InvalidTableName { name, .. } if name == bad
        );
        assert_err!(
            limits::check_table_name(bad),
            StoreError::InvalidTableName { .. }
        );
    }
    assert_eq!(s.list_tables_blocking().len(), 2);
}

#[test]
fn table_name_character_rules() {
    let s = LocalStore::in_memory();
    for ok in ["Abc", "a1_", "a__", "z99", "T_a_b_1"] {
        s.create_table_blocking(ok).unwrap();
    }
    for bad in [
        "1abc", "_abc", "9_a", "ab-c", "ab c", "abc.", "ab/c", "tablé", "éab", "ab\u{0}",
    ] {
        assert_err!(
            s.create_table_blocking(bad),
            StoreError::InvalidTableName { name, .. } if name == bad
        );
    }
    assert_eq!(s.list_tables_blocking().len(), 5);
}

#[test]
fn table_names_unique_case_insensitively() {
    let s = LocalStore::in_memory();
    s.create_table_blocking("Orders").unwrap();
    for dup in ["Orders", "orders", "ORDERS", "oRdErS"] {
        assert_err!(
            s.create_table_blocking(dup),
            StoreError::TableExists { name } if name == "Orders"
        );
    }
    // Lookups are case-insensitive too.
    s.execute_blocking("ORDERS", &[Operation::Insert(EntityWrite::new("p", "r"))])
        .unwrap();
    assert!(s.get_blocking("orders", "p", "r").unwrap().is_some());
    assert_eq!(
        s.list_tables_blocking(),
        [TableInfo {
            name: "Orders".into()
        }]
    );
}

#[test]
fn unknown_table_not_found_everywhere() {
    let s = store();
    let nf = |r: Result<()>| {
        assert_err!(r, StoreError::TableNotFound { name } if name == "nosuch");
    };
    nf(s.get_blocking("nosuch", "p", "r").map(drop));
    nf(
        s.execute_blocking("nosuch", &[Operation::Insert(EntityWrite::new("p", "r"))])
            .map(drop),
    );
    nf(
        s.query_blocking("nosuch", &Query::full_scan(), &PageRequest::default())
            .map(drop),
    );
    nf(s.drop_table_blocking("nosuch"));
    nf(s.table_stats_blocking("nosuch").map(drop));
}

#[test]
fn drop_removes_data_on_both_engines() {
    let dir = tempfile::tempdir().unwrap();
    let durable = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
    for s in [LocalStore::in_memory(), durable] {
        s.create_table_blocking("Gone").unwrap();
        s.create_table_blocking("Kept").unwrap();
        let ops: Vec<_> = (0..50)
            .map(|i| Operation::Insert(EntityWrite::new("p", format!("r{i:02}"))))
            .collect();
        s.execute_blocking("Gone", &ops).unwrap();
        s.execute_blocking("Kept", &ops).unwrap();

        s.drop_table_blocking("gone").unwrap();
        assert_err!(
            s.get_blocking("Gone", "p", "r00"),
            StoreError::TableNotFound { .. }
        );
        assert_err!(
            s.drop_table_blocking("Gone"),
            StoreError::TableNotFound { .. }
        );

        s.create_table_blocking("GONE").unwrap();
        assert_eq!(s.get_blocking("gone", "p", "r00").unwrap(), None);
        let page = s
            .query_blocking("gone", &Query::full_scan(), &PageRequest::default())
            .unwrap();
        assert!(page.entities.is_empty() && page.continuation.is_none());
        assert_eq!(
            s.table_stats_blocking("gone").unwrap(),
            TableStats {
                bytes: Some(0),
                ..TableStats::default()
            }
        );
        // The same keys insert cleanly, and the other table is untouched.
        s.execute_blocking("gone", &ops).unwrap();
        assert_eq!(s.table_stats_blocking("kept").unwrap().entities, 50);
    }
}

// ---- entity-group transactions ---------------------------------------------------

fn inserts(pk: &str, n: usize) -> Vec<Operation> {
    (0..n)
        .map(|i| Operation::Insert(EntityWrite::new(pk, format!("r{i:03}"))))
        .collect()
}

#[test]
fn batch_of_100_accepted_101_rejected_empty_rejected() {
    let s = store();
    let ops = inserts("p", 100);
    let out = s.execute_blocking(T, &ops).unwrap();
    assert_eq!(out.len(), 100);
    // One EGT, one timestamp.
    let stamp = |i: usize| out[i].entity(&ops[i]).unwrap().timestamp;
    assert!((0..100).all(|i| stamp(i) == stamp(0)));
    assert_err!(
        s.execute_blocking(T, &inserts("q", 101)),
        StoreError::BatchTooManyOperations {
            count: 101,
            limit: 100
        }
    );
    assert_err!(s.execute_blocking(T, &[]), StoreError::EmptyBatch);
    let all = scan_all(&s);
    assert_eq!(all.len(), 100);
    assert!(all.iter().all(|e| e.partition_key == "p"));
}

#[test]
fn batch_payload_4_mib_accepted_one_byte_more_rejected() {
    let s = store();
    // Four entities just under 1 MiB each plus one small one: 4,194,304 in
    // total, and every entity within its own 1 MiB limit.
    let build = |last: usize| -> Vec<Operation> {
        let mut ops: Vec<_> = (0..4)
            .map(|i| Operation::Insert(pad_to(EntityWrite::new("p", format!("r{i}")), MIB - 1000)))
            .collect();
        ops.push(Operation::Insert(pad_to(EntityWrite::new("p", "r4"), last)));
        ops
    };
    let exact = build(4000);
    assert_eq!(
        exact.iter().map(Operation::payload_size).sum::<usize>(),
        4 * MIB
    );
    assert_eq!(4 * MIB, 4_194_304);
    let over = build(4001);
    assert_eq!(
        over.iter().map(Operation::payload_size).sum::<usize>(),
        4 * MIB + 1
    );

    assert_err!(
        s.execute_blocking(T, &over),
        StoreError::BatchTooLarge {
            size: 4_194_305,
            limit: 4_194_304
        }
    );
    assert!(scan_all(&s).is_empty());
    let out = s.execute_blocking(T, &exact).unwrap();
    assert_eq!(out.len(), 5);
    let stored = scan_all(&s);
    assert_eq!(stored.len(), 5);
    assert_eq!(
        stored.iter().map(Entity::size_in_formula).sum::<usize>(),
        4 * MIB
    );
}

#[test]
fn batch_payload_counts_deletes_by_their_keys() {
    let op = Operation::Delete {
        partition_key: "pk".into(),
        row_key: "\u{1F600}".into(),
        if_match: IfMatch::Any,
    };
    assert_eq!(op.payload_size(), 4 + 2 * (2 + 2));
}

#[test]
fn batch_cross_partition_rejected_with_index() {
    let s = store();
    let mut ops = inserts("p", 5);
    ops.insert(3, Operation::Insert(EntityWrite::new("q", "x")));
    assert_err!(
        s.execute_blocking(T, &ops),
        StoreError::BatchCrossPartition { index: 3, expected, found }
            if expected == "p" && found == "q"
    );
    // A Delete in another partition counts as well.
    let ops = vec![
        Operation::Insert(EntityWrite::new("p", "a")),
        Operation::Delete {
            partition_key: "P".into(),
            row_key: "a".into(),
            if_match: IfMatch::Any,
        },
    ];
    assert_err!(
        s.execute_blocking(T, &ops),
        StoreError::BatchCrossPartition { index: 1, expected, found }
            if expected == "p" && found == "P"
    );
    assert!(scan_all(&s).is_empty());
}

#[test]
fn batch_duplicate_entity_rejected_with_index() {
    let s = store();
    insert_ok(&s, EntityWrite::new("p", "r001"));
    let mut ops = inserts("p", 4);
    ops.remove(1);
    ops.push(Operation::Merge {
        entity: EntityWrite::new("p", "r001"),
        if_match: IfMatch::Any,
    });
    ops.push(Operation::Delete {
        partition_key: "p".into(),
        row_key: "r001".into(),
        if_match: IfMatch::Any,
    });
    // ops: Insert r000, Insert r002, Insert r003, Merge r001, Delete r001.
    assert_err!(
        s.execute_blocking(T, &ops),
        StoreError::BatchDuplicateEntity { index: 4, partition_key, row_key }
            if partition_key == "p" && row_key == "r001"
    );
    assert_eq!(scan_all(&s).len(), 1);
}

#[test]
fn batch_failing_in_the_middle_applies_nothing() {
    let s = store();
    let x = insert_ok(&s, EntityWrite::new("p", "x").with("v", Value::Int32(1)));
    let r3 = insert_ok(&s, EntityWrite::new("p", "r3").with("v", Value::Int32(3)));
    let ops = vec![
        Operation::Insert(EntityWrite::new("p", "r0")),
        Operation::Replace {
            entity: EntityWrite::new("p", "x").with("v", Value::Int32(100)),
            if_match: IfMatch::ETag(x.etag()),
        },
        Operation::InsertOrReplace(EntityWrite::new("p", "r2")),
        Operation::Insert(EntityWrite::new("p", "r3").with("v", Value::Int32(300))),
        Operation::Insert(EntityWrite::new("p", "r4")),
    ];
    assert_op_err!(
        s.execute_blocking(T, &ops),
        3,
        StoreError::EntityAlreadyExists { partition_key, row_key }
            if partition_key == "p" && row_key == "r3"
    );
    assert_eq!(get(&s, "p", "x").as_ref(), Some(&x), "same value and ETag");
    assert_eq!(get(&s, "p", "r3").as_ref(), Some(&r3));
    for rk in ["r0", "r2", "r4"] {
        assert_eq!(get(&s, "p", rk), None);
    }
    assert_eq!(scan_all(&s), [r3.clone(), x.clone()]);
    assert_eq!(
        s.table_stats_blocking(T).unwrap(),
        TableStats {
            entities: 2,
            partitions: 1,
            bytes: bytes_of(&[r3.clone(), x.clone()]),
        }
    );

    // Other failures in the middle: a precondition and a limit found when
    // applying, and one found by validation before anything is read.
    let cases: Vec<(Vec<Operation>, usize)> = vec![
        (
            vec![
                Operation::Insert(EntityWrite::new("p", "n0")),
                Operation::Delete {
                    partition_key: "p".into(),
                    row_key: "x".into(),
                    if_match: IfMatch::Any,
                },
                Operation::Delete {
                    partition_key: "p".into(),
                    row_key: "missing".into(),
                    if_match: IfMatch::Any,
                },
            ],
            2,
        ),
        (
            vec![
                Operation::Delete {
                    partition_key: "p".into(),
                    row_key: "r3".into(),
                    if_match: IfMatch::Any,
                },
                Operation::Merge {
                    entity: with_props(EntityWrite::new("p", "x"), prop_names(0..252)),
                    if_match: IfMatch::Any,
                },
            ],
            1,
        ),
        (
            vec![
                Operation::Insert(EntityWrite::new("p", "n0")),
                Operation::Insert(EntityWrite::new("p", "n1")),
                Operation::Insert(
                    EntityWrite::new("p", "n2").with("d", Value::DateTime(DateTime(i64::MIN))),
                ),
            ],
            2,
        ),
    ];
    for (ops, index) in cases {
        let err = s.execute_blocking(T, &ops).expect_err("batch must fail");
        assert!(
            matches!(err, StoreError::BatchOperationFailed { index: i, .. } if i == index),
            "{err:?}"
        );
        assert_eq!(scan_all(&s), [r3.clone(), x.clone()], "after {err}");
    }
    assert_eq!(s.table_stats_blocking(T).unwrap().entities, 2);
}

// ---- operation errors, ETags, Timestamps ---------------------------------------

#[test]
fn insert_existing_and_update_missing_rejected() {
    let s = store();
    insert_ok(&s, EntityWrite::new("p", "r"));
    assert_op_err!(
        insert(&s, EntityWrite::new("p", "r")),
        0,
        StoreError::EntityAlreadyExists { partition_key, row_key }
            if partition_key == "p" && row_key == "r"
    );
    let stale = ETag::from_timestamp(DateTime(1));
    for if_match in [IfMatch::Any, IfMatch::ETag(stale)] {
        for op in [
            Operation::Replace {
                entity: EntityWrite::new("p", "missing"),
                if_match: if_match.clone(),
            },
            Operation::Merge {
                entity: EntityWrite::new("p", "missing"),
                if_match: if_match.clone(),
            },
            Operation::Delete {
                partition_key: "p".into(),
                row_key: "missing".into(),
                if_match: if_match.clone(),
            },
        ] {
            let name = op.name();
            let err = s.execute_blocking(T, &[op]).expect_err(name);
            assert!(
                matches!(err.root(), StoreError::EntityNotFound { partition_key, row_key }
                    if partition_key == "p" && row_key == "missing"),
                "{name}: {err:?}"
            );
        }
    }
    // Upserts create.
    s.execute_blocking(T, &[Operation::InsertOrReplace(EntityWrite::new("p", "a"))])
        .unwrap();
    s.execute_blocking(T, &[Operation::InsertOrMerge(EntityWrite::new("p", "b"))])
        .unwrap();
    assert_eq!(scan_all(&s).len(), 3);
}

#[test]
fn stale_etag_rejected_any_accepted() {
    let s = store();
    let e1 = insert(&s, EntityWrite::new("p", "r").with("v", Value::Int32(1))).unwrap()[0]
        .etag()
        .unwrap();
    let e2 = s
        .execute_blocking(
            T,
            &[Operation::Replace {
                entity: EntityWrite::new("p", "r").with("v", Value::Int32(2)),
                if_match: IfMatch::Any,
            }],
        )
        .unwrap()[0]
        .etag()
        .unwrap();
    assert_ne!(e1, e2);
    assert_eq!(get(&s, "p", "r").unwrap().etag(), e2);

    let stale = IfMatch::ETag(e1.clone());
    for op in [
        Operation::Replace {
            entity: EntityWrite::new("p", "r"),
            if_match: stale.clone(),
        },
        Operation::Merge {
            entity: EntityWrite::new("p", "r"),
            if_match: stale.clone(),
        },
        Operation::Delete {
            partition_key: "p".into(),
            row_key: "r".into(),
            if_match: stale.clone(),
        },
    ] {
        let name = op.name();
        let err = s.execute_blocking(T, &[op]).expect_err(name);
        assert!(
            matches!(&err, StoreError::BatchOperationFailed { index: 0, .. }),
            "{err:?}"
        );
        assert!(
            matches!(err.root(), StoreError::ETagMismatch { partition_key, row_key, expected, actual }
                if partition_key == "p" && row_key == "r" && *expected == e1.0 && *actual == e2.0),
            "{name}: {err:?}"
        );
    }
    assert_eq!(get(&s, "p", "r").unwrap().properties["v"], Value::Int32(2));

    // The current ETag and `*` both match.
    let e3 = s
        .execute_blocking(
            T,
            &[Operation::Merge {
                entity: EntityWrite::new("p", "r").with("w", Value::Int32(3)),
                if_match: IfMatch::ETag(e2.clone()),
            }],
        )
        .unwrap()[0]
        .etag()
        .unwrap();
    let e4 = s
        .execute_blocking(
            T,
            &[Operation::Merge {
                entity: EntityWrite::new("p", "r").with("x", Value::Int32(4)),
                if_match: IfMatch::Any,
            }],
        )
        .unwrap()[0]
        .etag()
        .unwrap();
    let e5 = s
        .execute_blocking(
            T,
            &[Operation::Replace {
                entity: EntityWrite::new("p", "r"),
                if_match: IfMatch::Any,
            }],
        )
        .unwrap()[0]
        .etag()
        .unwrap();
    assert!(
        get(&s, "p", "r").unwrap().properties.is_empty(),
        "Replace drops"
    );
    assert_eq!(
        [&e2, &e3, &e4, &e5]
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        4
    );
    let stale_delete = s.execute_blocking(
        T,
        &[Operation::Delete {
            partition_key: "p".into(),
            row_key: "r".into(),
            if_match: IfMatch::ETag(e4),
        }],
    );
    assert_op_err!(stale_delete, 0, StoreError::ETagMismatch { .. });
    let out = s
        .execute_blocking(
            T,
            &[Operation::Delete {
                partition_key: "p".into(),
                row_key: "r".into(),
                if_match: IfMatch::Any,
            }],
        )
        .unwrap();
    assert_eq!(
        out[0],
        OpOutcome {
            written: Written::Deleted,
            existed: true
        }
    );
    assert_eq!(get(&s, "p", "r"), None);
}

#[test]
fn etag_mismatch_inside_a_batch_names_its_index() {
    let s = store();
    let a = insert_ok(&s, EntityWrite::new("p", "a"));
    let b = insert_ok(&s, EntityWrite::new("p", "b"));
    // Make `a`'s ETag stale.
    s.execute_blocking(T, &[Operation::InsertOrMerge(EntityWrite::new("p", "a"))])
        .unwrap();
    let a_now = get(&s, "p", "a").unwrap();
    let ops = vec![
        Operation::Merge {
            entity: EntityWrite::new("p", "b").with("v", Value::Int32(1)),
            if_match: IfMatch::ETag(b.etag()),
        },
        Operation::Merge {
            entity: EntityWrite::new("p", "a").with("v", Value::Int32(1)),
            if_match: IfMatch::ETag(a.etag()),
        },
    ];
    assert_op_err!(
        s.execute_blocking(T, &ops),
        1,
        StoreError::ETagMismatch { .. }
    );
    assert_eq!(get(&s, "p", "b").as_ref(), Some(&b));
    assert_eq!(get(&s, "p", "a").as_ref(), Some(&a_now));
}

/// Every kind of write, none of which changes a value.
fn no_op_writes() -> Vec<Operation> {
    let w = || EntityWrite::new("p", "r").with("v", Value::Int32(1));
    vec![
        Operation::InsertOrReplace(w()),
        Operation::Replace {
            entity: w(),
            if_match: IfMatch::Any,
        },
        Operation::Merge {
            entity: w(),
            if_match: IfMatch::Any,
        },
        Operation::Merge {
            entity: EntityWrite::new("p", "r"),
            if_match: IfMatch::Any,
        },
        Operation::InsertOrMerge(EntityWrite::new("p", "r")),
        Operation::InsertOrMerge(w()),
    ]
}

fn etag_changes_on_every_write(s: &LocalStore) {
    s.create_table_blocking(T).unwrap();
    let first = insert_ok(s, EntityWrite::new("p", "r").with("v", Value::Int32(1)));
    let mut prev = first.clone();
    let mut seen = std::collections::HashSet::from([first.etag()]);
    for round in 0..20 {
        for op in no_op_writes() {
            let name = op.name();
            let out = s.execute_blocking(T, std::slice::from_ref(&op)).unwrap();
            let now = get(s, "p", "r").unwrap();
            assert_eq!(out[0].entity(&op).as_ref(), Some(&now));
            assert_eq!(out[0].etag(), Some(now.etag()));
            assert!(out[0].existed);
            assert_eq!(now.properties, first.properties, "{name}: no value changed");
            assert!(
                now.timestamp > prev.timestamp,
                "round {round} {name}: Timestamp {} not after {}",
                now.timestamp,
                prev.timestamp
            );
            assert_ne!(now.etag(), prev.etag(), "{name}");
            assert!(
                seen.insert(now.etag()),
                "{name}: ETag {} reused",
                now.etag()
            );
            prev = now;
        }
    }
}

#[test]
fn etag_and_timestamp_change_on_every_write_system_clock() {
    etag_changes_on_every_write(&LocalStore::in_memory());
}

#[test]
fn etag_and_timestamp_change_on_every_write_frozen_clock() {
    // A clock that never moves: the store must still hand out strictly
    // increasing Timestamps (and so distinct ETags).
    let clock = Arc::new(ManualClock::at(1_700_000_000_000_000));
    etag_changes_on_every_write(&LocalStore::in_memory_with_clock(clock));
}

#[test]
fn timestamps_increase_across_entities_and_ignore_nothing_of_old_values() {
    // Several entities written in turn with a frozen clock: each write's
    // Timestamp is later than every earlier one.
    let clock = Arc::new(ManualClock::at(0));
    let s = LocalStore::in_memory_with_clock(clock.clone());
    s.create_table_blocking(T).unwrap();
    let mut last = DateTime(i64::MIN);
    for i in 0..30 {
        let pk = format!("p{}", i % 3);
        let op = Operation::InsertOrReplace(EntityWrite::new(pk, "r"));
        let out = s.execute_blocking(T, std::slice::from_ref(&op)).unwrap();
        let ts = out[0].entity(&op).unwrap().timestamp;
        assert!(ts > last, "{ts} after {last}");
        last = ts;
        if i == 15 {
            clock.advance(std::time::Duration::from_secs(1));
        }
    }
    assert!(last.0 >= 1_000_000);
}

// ---- pages and continuation tokens ------------------------------------------------

fn load(s: &LocalStore, pk: &str, n: usize) {
    let ops: Vec<_> = (0..n)
        .map(|i| Operation::Insert(EntityWrite::new(pk, format!("r{i:05}"))))
        .collect();
    for chunk in ops.chunks(limits::MAX_BATCH_OPERATIONS) {
        s.execute_blocking(T, chunk).unwrap();
    }
}

#[test]
fn page_size_1000_accepted_0_and_1001_rejected() {
    let s = store();
    load(&s, "p", 1001);
    let q = Query::full_scan();
    let page = s.query_blocking(T, &q, &PageRequest::first(1000)).unwrap();
    assert_eq!(page.entities.len(), 1000);
    let token = page.continuation.expect("one entity left");
    let rest = s
        .query_blocking(T, &q, &PageRequest::first(1000).resume(token))
        .unwrap();
    assert_eq!(rest.entities.len(), 1);
    assert_eq!(rest.entities[0].row_key, "r01000");
    assert_eq!(rest.continuation, None);
    assert_eq!(PageRequest::default().max_entities, 1000);
    // Exactly 1000 left: one full page that completes the query.
    let part = Query::spans(vec![KeyBox {
        pk: KeyInterval::point("p"),
        rk: KeyInterval::new(Bound::Included("r00001".into()), Bound::Unbounded),
    }]);
    let page = s
        .query_blocking(T, &part, &PageRequest::first(1000))
        .unwrap();
    assert_eq!(page.entities.len(), 1000);
    assert_eq!(page.continuation, None);

    for n in [0, 1001, usize::MAX] {
        assert_err!(
            s.query_blocking(T, &q, &PageRequest::first(n)),
            StoreError::InvalidQuery { .. }
        );
    }
    // Size 1 is the smallest page.
    let one = s.query_blocking(T, &q, &PageRequest::first(1)).unwrap();
    assert_eq!(one.entities.len(), 1);
    assert!(one.continuation.is_some());
}

#[test]
fn continuation_token_bound_to_its_query() {
    let s = store();
    s.create_table_blocking("other").unwrap();
    load(&s, "p", 30);
    s.execute_blocking("other", &[Operation::Insert(EntityWrite::new("p", "r"))])
        .unwrap();
    let q = Query::full_scan();
    let token = s
        .query_blocking(T, &q, &PageRequest::first(10))
        .unwrap()
        .continuation
        .expect("more");

    // Another query (spans, filter or projection differ) on the same table.
    let others = [
        Query::spans(vec![KeyBox::partition("p")]),
        Query::full_scan().with_projection(vec!["v".into()]),
        Query::full_scan().with_filter(Filter::cmp(
            Field::RowKey,
            CmpOp::Ge,
            Value::String("r".into()),
        )),
    ];
    for other in &others {
        assert_err!(
            s.query_blocking(T, other, &PageRequest::first(10).resume(token.clone())),
            StoreError::InvalidContinuationToken { .. }
        );
    }
    // The same query on another table.
    assert_err!(
        s.query_blocking("other", &q, &PageRequest::first(10).resume(token.clone())),
        StoreError::InvalidContinuationToken { .. }
    );
    // The right query resumes, with any page size.
    let next = s
        .query_blocking(T, &q, &PageRequest::first(1000).resume(token.clone()))
        .unwrap();
    assert_eq!(next.entities.len(), 20);
    assert_eq!(next.entities[0].row_key, "r00010");
    // Table names are case-insensitive, so is the binding.
    s.query_blocking("LIMITS", &q, &PageRequest::first(10).resume(token))
        .unwrap();
}

#[test]
fn garbage_continuation_tokens_rejected() {
    let s = store();
    load(&s, "p", 30);
    let q = Query::full_scan();
    let real = s
        .query_blocking(T, &q, &PageRequest::first(10))
        .unwrap()
        .continuation
        .expect("more");
    let garbage = [
        String::new(),
        "!!".into(),
        "not a token".into(),
        "AAAA".into(),
        "AQ".into(),
        "////".into(),
        format!("{}!", real.as_str()),
        real.as_str()[..8].to_owned(),
        "A".repeat(100),
    ];
    for g in garbage {
        assert_err!(
            s.query_blocking(
                T,
                &q,
                &PageRequest::first(10).resume(ContinuationToken::from_string(g.clone()))
            ),
            StoreError::InvalidContinuationToken { .. }
        );
    }
}

// ---- at-limit entities on disk ---------------------------------------------------

#[test]
fn at_limit_entities_survive_reopen_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    // U+FFFD is 3 bytes of UTF-8 and one UTF-16 unit: the longest key in bytes.
    let wide = "\u{FFFD}".repeat(512);
    let writes = vec![
        EntityWrite::new("", ""),
        EntityWrite::new(wide.clone(), wide.clone()),
        EntityWrite::new("\u{1F600}".repeat(256), "~ \u{A0}"),
        with_props(EntityWrite::new("p", "props"), prop_names(0..252)),
        EntityWrite::new("p", "values")
            .with("s", Value::String("\u{1F600}".repeat(16_384)))
            .with("b", bin(65_536))
            .with("lo", Value::DateTime(DateTime::MIN))
            .with("hi", Value::DateTime(DateTime::MAX))
            .with("n", Value::Double(f64::NAN))
            .with_null("null"),
        pad_to(EntityWrite::new("p", "mib"), MIB),
    ];
    let expected: Vec<Entity> = {
        let s = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
        s.create_table_blocking(T).unwrap();
        let mut out: Vec<Entity> = writes.into_iter().map(|w| insert_ok(&s, w)).collect();
        // A full 4 MiB batch as well.
        let ops: Vec<_> = (0..4)
            .map(|i| Operation::Insert(pad_to(EntityWrite::new("q", format!("r{i}")), MIB)))
            .collect();
        out.extend(
            s.execute_blocking(T, &ops)
                .unwrap()
                .into_iter()
                .zip(&ops)
                .map(|(o, op)| o.into_entity(op).unwrap()),
        );
        out.sort_by(|a, b| (&a.partition_key, &a.row_key).cmp(&(&b.partition_key, &b.row_key)));
        assert_eq!(scan_all(&s), out);
        out
    };
    let s = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(scan_all(&s), expected);
    for e in &expected {
        assert_eq!(get(&s, &e.partition_key, &e.row_key).as_ref(), Some(e));
    }
    assert_eq!(
        s.table_stats_blocking(T).unwrap(),
        TableStats {
            entities: 10,
            partitions: 5,
            bytes: bytes_of(&expected),
        }
    );
}

/// What the store's byte statistic should say for exactly these entities.
fn bytes_of(entities: &[Entity]) -> Option<u64> {
    Some(
        entities
            .iter()
            .map(|e| {
                let props = e.properties.iter().map(|(k, v)| (k.as_str(), v));
                stored_len(&e.partition_key, &e.row_key, props)
            })
            .sum(),
    )
}
