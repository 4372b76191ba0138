//! The point shortcut (`exact_point`) against the general path.

use super::*;
use tablegate_catalog::{ColumnRef, SqlType};
use tablegate_store::Value;

fn col(name: &str, role: Role) -> BExpr {
    BExpr::Column(ColumnRef {
        name: name.into(),
        ty: SqlType::Text,
        role,
        nullable: false,
    })
}

fn eq(a: BExpr, b: BExpr) -> BExpr {
    BExpr::Cmp(Box::new(a), CmpOp::Eq, Box::new(b))
}

fn text(s: &str) -> BExpr {
    BExpr::Lit(Value::String(s.into()))
}

/// The point shortcut answers exactly what the general path derives,
/// and leaves every other shape to it.
#[test]
fn the_point_shortcut_agrees_with_the_general_path() {
    let pk = || col("pk", Role::PartitionKey);
    let rk = || col("rk", Role::RowKey);
    let n = || col("n", Role::Property);
    let taken = [
        BExpr::And(vec![eq(pk(), text("a")), eq(rk(), text("b"))]),
        BExpr::And(vec![eq(rk(), text("")), eq(pk(), text("p q"))]),
    ];
    for p in &taken {
        let fast = exact_point(p).expect("a point");
        assert_eq!(fast, Access::derived(Some(p), true), "{p:?}");
        assert_eq!(fast.class, AccessClass::Point);
        assert_eq!(Access::from_where(Some(p), true), fast);
    }
    let left = [
        BExpr::And(vec![eq(pk(), text("a")), eq(pk(), text("b"))]),
        BExpr::And(vec![eq(rk(), text("a")), eq(rk(), text("a"))]),
        BExpr::And(vec![eq(pk(), text("a")), eq(n(), text("b"))]),
        BExpr::And(vec![eq(text("a"), pk()), eq(rk(), text("b"))]),
        BExpr::And(vec![eq(pk(), text("a")), eq(rk(), BExpr::Null)]),
        BExpr::And(vec![
            eq(pk(), text("a")),
            eq(rk(), text("b")),
            eq(n(), text("c")),
        ]),
        BExpr::Or(vec![eq(pk(), text("a")), eq(rk(), text("b"))]),
        eq(pk(), text("a")),
    ];
    for p in &left {
        assert_eq!(exact_point(p), None, "{p:?}");
        assert_eq!(
            Access::from_where(Some(p), true),
            Access::derived(Some(p), true)
        );
    }
    // One-column keys: `pk = a AND rk = b` cannot occur, and the
    // shortcut is not asked.
    let p = &taken[0];
    assert_eq!(
        Access::from_where(Some(p), false),
        Access::derived(Some(p), false)
    );
}

/// Both stores' ETags read as their Timestamp (the service's to the
/// microsecond), and equality on the ETag column compares the tags.
#[test]
fn etags_of_both_stores_are_understood() {
    let embedded = etag_timestamp("W/\"datetime'2026-11-28T13:29:26.642432Z'\"").unwrap();
    let service = etag_timestamp("W/\"datetime'2026-11-28T13%3A29%3A26.6424327Z'\"").unwrap();
    assert_eq!(embedded, service);
    for bad in [
        "W/\"wrong\"",
        "W/\"datetime'2026-11-28T13%3A29%3A26.Z'\"",
        "W/\"datetime'2026-11-28T13%3A29%3A26.64x'\"",
        "\"datetime'2026-11-28T13:29:26Z'\"",
    ] {
        assert_eq!(etag_timestamp(bad), None, "{bad}");
    }
    let tag = "W/\"datetime'2026-11-28T13%3A29%3A26.6424327Z'\"";
    assert_eq!(
        to_filter(&eq(col("etag", Role::ETag), text(tag))),
        Some(tablegate_store::Filter::Compare {
            field: tablegate_store::Field::ETag,
            op: CmpOp::Eq,
            value: Value::String(tag.into()),
        })
    );
    assert_eq!(
        to_filter(&eq(col("etag", Role::ETag), text("W/\"wrong\""))),
        Some(tablegate_store::Filter::False)
    );
}
