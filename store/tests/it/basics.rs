//! Smoke tests of the public API on both engines.

use tablegate_store::*;

fn stores() -> Vec<(&'static str, LocalStore, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let durable = LocalStore::open(dir.path(), StoreOptions::default()).unwrap();
    vec![
        ("memory", LocalStore::in_memory(), None),
        ("fjall", durable, Some(dir)),
    ]
}

#[test]
fn insert_get_query_round_trip() {
    for (name, s, _dir) in stores() {
        s.create_table_blocking("people").unwrap();
        let ops: Vec<_> = (0..10)
            .map(|i| {
                Operation::Insert(EntityWrite::new("p", format!("r{i}")).with("n", Value::Int32(i)))
            })
            .collect();
        s.execute_blocking("people", &ops).unwrap();
        let e = s.get_blocking("PEOPLE", "p", "r3").unwrap().unwrap();
        assert_eq!(e.properties["n"], Value::Int32(3), "{name}");
        let page = s
            .query_blocking("people", &Query::full_scan(), &PageRequest::first(4))
            .unwrap();
        assert_eq!(page.entities.len(), 4, "{name}");
        assert!(page.continuation.is_some(), "{name}");
        assert_eq!(
            s.table_stats_blocking("people").unwrap().entities,
            10,
            "{name}"
        );
    }
}
