//! Tables the way people write them. Typed key columns against PostgreSQL
//! 15: tables keyed by bigint,
//! (integer, timestamptz), uuid and (smallint, date), the same rows in both, and generated
//! key predicates (every comparison, BETWEEN, IN, NOT IN, row values,
//! fractions and values beyond the type's range, negatives) giving the same
//! rows. Also: range predicates stay row-range / partition-range queries,
//! writes by typed key, and the errors a typed key can give. Tables
//! without a primary key: hidden keys, the same rows as PostgreSQL.

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::pgref::{PgRef, SideBySide, client as connect};
use super::rng::Rng;
use super::server::TestServer;

const SCHEMA: &[&str] = &[
    "CREATE TABLE acct (id bigint PRIMARY KEY, bal int, owner text)",
    "CREATE TABLE ticks (sensor int, ts timestamptz, v double precision, \
     PRIMARY KEY (sensor, ts))",
    "CREATE TABLE docs (id uuid PRIMARY KEY, n int)",
    "CREATE TABLE visits (site smallint, day date, hits smallint, \
     PRIMARY KEY (site, day))",
];

const SITES: &[i16] = &[i16::MIN, -7, 0, 3, 12, i16::MAX];

fn day(d: u64) -> String {
    let (y, rest) = (2025 + d / 400, d % 400);
    format!("'{y}-{:02}-{:02}'", 1 + rest / 28 % 12, 1 + rest % 28)
}

/// Bigint ids: both extremes, negatives, zero, and numbers whose decimal
/// text sorts differently from their value (9 < 10, -1 > -10).
const IDS: &[i64] = &[
    i64::MIN,
    i64::MIN + 1,
    -1_000_000_007,
    -100,
    -10,
    -9,
    -1,
    0,
    1,
    9,
    10,
    11,
    99,
    100,
    1_000,
    4_294_967_296,
    i64::MAX - 1,
    i64::MAX,
];

const SENSORS: &[i32] = &[i32::MIN, -20, -3, 0, 2, 10, 300, i32::MAX];

fn hour(h: u64) -> String {
    format!("'2026-03-{:02} {:02}:30:00+00'", 1 + h / 24, h % 24)
}

fn uuid(i: u64) -> String {
    let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let h = format!("{x:016x}{:016x}", x.rotate_left(17));
    format!(
        "'{}-{}-{}-{}-{}'",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn inserts() -> Vec<String> {
    let mut out = Vec::new();
    let acct: Vec<String> = IDS
        .iter()
        .enumerate()
        .map(|(i, id)| format!("({id}, {}, 'o{}')", i * 7 % 13, i % 4))
        .collect();
    out.push(format!("INSERT INTO acct VALUES {}", acct.join(", ")));
    for (i, s) in SENSORS.iter().enumerate() {
        let rows: Vec<String> = (0..30u64)
            .filter(|h| !(h + i as u64).is_multiple_of(3))
            .map(|h| format!("({s}, {}, {})", hour(h), h as f64 * 1.5 - i as f64))
            .collect();
        out.push(format!("INSERT INTO ticks VALUES {}", rows.join(", ")));
    }
    let docs: Vec<String> = (0..25u64).map(|i| format!("({}, {i})", uuid(i))).collect();
    out.push(format!("INSERT INTO docs VALUES {}", docs.join(", ")));
    for (i, s) in SITES.iter().enumerate() {
        let rows: Vec<String> = (0..40u64)
            .filter(|d| !(d + i as u64).is_multiple_of(4))
            .map(|d| format!("({s}, {}, {})", day(d * 11), (d * 97 + i as u64) % 30_000))
            .collect();
        out.push(format!("INSERT INTO visits VALUES {}", rows.join(", ")));
    }
    out
}

/// A constant to compare a smallint key with, beyond its range included.
fn smallint_const(r: &mut Rng) -> String {
    let s = SITES[r.below(SITES.len() as u64) as usize];
    match r.below(6) {
        0 => format!("{}", i64::from(s) + 1),
        1 => format!("{}", i64::from(s) - 1),
        2 => format!("{s}.5"),
        3 => ["40000", "-40000"][r.below(2) as usize].into(),
        _ => format!("{s}"),
    }
}

/// A constant to compare a bigint key with: an id, a neighbour of one, a
/// fraction between two, or a value outside bigint.
fn bigint_const(r: &mut Rng) -> String {
    let id = IDS[r.below(IDS.len() as u64) as usize];
    match r.below(6) {
        0 => format!("{}", i128::from(id) + 1),
        1 => format!("{}", i128::from(id) - 1),
        2 => format!("{id}.5"),
        3 => ["9223372036854775808", "-9223372036854775809", "1e20"][r.below(3) as usize].into(),
        _ => format!("{id}"),
    }
}

fn int_const(r: &mut Rng) -> String {
    let s = SENSORS[r.below(SENSORS.len() as u64) as usize];
    match r.below(5) {
        0 => format!("{}", i64::from(s) + 1),
        1 => format!("{}", i64::from(s) - 1),
        2 => format!("{s}.5"),
        _ => format!("{s}"),
    }
}

fn cmp_op(r: &mut Rng) -> &'static str {
    ["=", "<", "<=", ">", ">=", "<>"][r.below(6) as usize]
}

fn key_predicate(r: &mut Rng, col: &str, konst: &mut dyn FnMut(&mut Rng) -> String) -> String {
    match r.below(6) {
        0 | 1 => format!("{col} {} {}", cmp_op(r), konst(r)),
        2 => format!(
            "{col} {}BETWEEN {} AND {}",
            if r.below(3) == 0 { "NOT " } else { "" },
            konst(r),
            konst(r)
        ),
        3 => format!(
            "{col} {}IN ({}, {}, {})",
            if r.below(3) == 0 { "NOT " } else { "" },
            konst(r),
            konst(r),
            konst(r)
        ),
        4 => format!(
            "({col} {} {} OR {col} {} {})",
            cmp_op(r),
            konst(r),
            cmp_op(r),
            konst(r)
        ),
        _ => format!(
            "{col} {} {} AND {col} {} {}",
            cmp_op(r),
            konst(r),
            cmp_op(r),
            konst(r)
        ),
    }
}

fn queries() -> Vec<String> {
    let mut r = Rng::new(0x7e57_ed6e_4b00_0001);
    let mut out = Vec::new();
    for _ in 0..70 {
        let p = key_predicate(&mut r, "id", &mut bigint_const);
        out.push(format!("SELECT id, bal FROM acct WHERE {p} ORDER BY id"));
    }
    for _ in 0..50 {
        let p = key_predicate(&mut r, "sensor", &mut int_const);
        let t = match r.below(4) {
            0 => String::new(),
            1 => format!(" AND ts {} {}", cmp_op(&mut r), hour(r.below(32))),
            2 => format!(
                " AND ts BETWEEN {} AND {}",
                hour(r.below(32)),
                hour(r.below(32))
            ),
            _ => format!(
                " OR (sensor, ts) {} ({}, {})",
                cmp_op(&mut r),
                int_const(&mut r),
                hour(r.below(32))
            ),
        };
        out.push(format!(
            "SELECT sensor, ts, v FROM ticks WHERE {p}{t} ORDER BY sensor, ts"
        ));
    }
    for _ in 0..20 {
        let p = match r.below(3) {
            0 => format!("id {} {}", cmp_op(&mut r), uuid(r.below(30))),
            1 => format!("id IN ({}, {})", uuid(r.below(30)), uuid(r.below(30))),
            _ => format!("id BETWEEN {} AND {}", uuid(r.below(30)), uuid(r.below(30))),
        };
        out.push(format!("SELECT id, n FROM docs WHERE {p} ORDER BY id"));
    }
    for _ in 0..40 {
        let p = key_predicate(&mut r, "site", &mut smallint_const);
        let d = match r.below(4) {
            0 => String::new(),
            1 => format!(" AND day {} {}", cmp_op(&mut r), day(r.below(480))),
            2 => format!(
                " AND day BETWEEN {} AND {}",
                day(r.below(480)),
                day(r.below(480))
            ),
            _ => format!(
                " OR (site, day) {} ({}, {})",
                cmp_op(&mut r),
                smallint_const(&mut r),
                day(r.below(480))
            ),
        };
        out.push(format!(
            "SELECT site, day, hits FROM visits WHERE {p}{d} ORDER BY site, day"
        ));
    }
    out.extend(
        [
            "SELECT id, bal, owner FROM acct ORDER BY id",
            "SELECT id FROM acct ORDER BY id DESC LIMIT 5",
            "SELECT min(id), max(id), count(*) FROM acct",
            "SELECT owner, count(*), min(id) FROM acct GROUP BY owner ORDER BY owner",
            "SELECT a.id, b.id FROM acct a JOIN acct b ON b.bal = a.bal AND b.id > a.id ORDER BY a.id, b.id",
            "SELECT sensor, count(*), max(ts) FROM ticks GROUP BY sensor ORDER BY sensor",
            "SELECT sensor, ts FROM ticks WHERE (sensor, ts) = (2, '2026-03-01 01:30:00+00')",
            "SELECT count(*) FROM ticks WHERE sensor = 10 AND ts >= '2026-03-01 12:00+00'",
            "SELECT id FROM acct WHERE id = 2.0",
            "SELECT id FROM acct WHERE id IS NULL",
            "SELECT n FROM docs WHERE id = (SELECT id FROM docs WHERE n = 3)",
            "SELECT site, count(*), min(day), max(day), sum(hits) FROM visits GROUP BY site ORDER BY site",
            "SELECT day, hits FROM visits WHERE site = 3 AND day >= '2025-06-01' AND day < date '2025-09-01' ORDER BY day",
            "SELECT site, day FROM visits WHERE day = '2025-01-12 15:00' ORDER BY site",
            "SELECT hits + 1, day + 1, day - date '2025-01-01' FROM visits WHERE site = 0 ORDER BY day LIMIT 5",
        ]
        .map(String::from),
    );
    out
}

async fn query(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let msgs = c.simple_query(sql).await.map_err(|e| format!("{e:?}"))?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).map(|v| v.replace("+00:00", "+00")))
                    .collect(),
            ),
            _ => None,
        })
        .collect())
}

#[tokio::test]
async fn typed_key_queries_match_postgresql() {
    let SideBySide { p, t, .. } = &SideBySide::start().await;
    for c in [p, t] {
        for sql in SCHEMA.iter().map(|s| s.to_string()).chain(inserts()) {
            c.batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
    }
    let qs = queries();
    let mut failures = Vec::new();
    for sql in &qs {
        let want = query(p, sql).await;
        let got = query(t, sql).await;
        match (&want, &got) {
            (Ok(w), Ok(g)) if w == g => {}
            // Both refuse (a constant beyond the type): the same SQLSTATE.
            (Err(w), Err(g)) if sqlstate(w) == sqlstate(g) => {}
            _ => failures.push(format!(
                "{sql}\n  postgres: {}\n  tablegate: {}",
                shown(&want),
                shown(&got)
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        qs.len(),
        failures.join("\n")
    );

    // Writes by typed key, then the same contents.
    for sql in [
        "UPDATE acct SET bal = bal + 100 WHERE id = -10",
        "UPDATE acct SET bal = 0 WHERE id BETWEEN -100 AND 10",
        "DELETE FROM acct WHERE id = 9223372036854775807",
        "DELETE FROM ticks WHERE sensor = -3 AND ts < '2026-03-01 10:00+00'",
        "INSERT INTO acct VALUES (5, 1, 'new') ON CONFLICT (id) DO UPDATE SET bal = 2",
        "INSERT INTO acct VALUES (5, 1, 'new') ON CONFLICT (id) DO UPDATE SET bal = 2",
        "INSERT INTO acct VALUES (-5, 1, 'new') ON CONFLICT (id) DO NOTHING",
        "UPDATE visits SET hits = hits + 1 WHERE site = -7 AND day < '2025-06-01'",
        "DELETE FROM visits WHERE site = 32767 AND day BETWEEN '2025-03-01' AND '2025-08-01'",
        "INSERT INTO visits VALUES (5, '2026-11-28 23:59', 1), (-5, date '2026-11-28', 2)",
        "INSERT INTO visits VALUES (5, '2026-11-28', 9) ON CONFLICT (site, day) DO UPDATE SET hits = EXCLUDED.hits",
    ] {
        let a = p.batch_execute(sql).await.map_err(|e| e.to_string());
        let b = t.batch_execute(sql).await.map_err(|e| e.to_string());
        assert!(
            a.is_ok() && b.is_ok(),
            "{sql}\n  postgres: {a:?}\n  tablegate: {b:?}"
        );
    }
    for sql in [
        "SELECT id, bal, owner FROM acct ORDER BY id",
        "SELECT sensor, ts, v FROM ticks ORDER BY sensor, ts",
        "SELECT site, day, hits FROM visits ORDER BY site, day",
    ] {
        assert_eq!(query(p, sql).await, query(t, sql).await, "{sql}");
    }
}

fn sqlstate(e: &str) -> Option<&str> {
    let c = e.split("code: SqlState(").nth(1)?;
    Some(&c[..c.find(')')?])
}

fn shown(r: &Result<Vec<Vec<Option<String>>>, String>) -> String {
    match r {
        Ok(rows) => format!(
            "{} rows {:?}",
            rows.len(),
            rows.iter().take(6).collect::<Vec<_>>()
        ),
        Err(e) => format!("error {:?}", sqlstate(e).unwrap_or(e)),
    }
}

/// Ranges on typed keys are key spans, not scans; the keys are stored as
/// documented; typed-key errors carry their SQLSTATE.
#[tokio::test]
async fn typed_keys_are_key_spans_and_errors_are_clear() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let t = connect(&s.conn_str()).await;
    for sql in SCHEMA {
        t.batch_execute(sql).await.unwrap();
    }
    let explain = |sql: &'static str| {
        let t = &t;
        async move {
            query(t, &format!("EXPLAIN {sql}"))
                .await
                .unwrap()
                .into_iter()
                .map(|r| r[0].clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let plan = explain("SELECT bal FROM acct WHERE id = -42").await;
    assert!(plan.contains("Class: point"), "{plan}");
    assert!(
        plan.contains("PartitionKey = '-9999999999999999957' (id = -42)"),
        "{plan}"
    );
    let plan = explain("SELECT bal FROM acct WHERE id >= 10 AND id < 20").await;
    assert!(plan.contains("Class: partition-range"), "{plan}");
    assert!(plan.contains("Route: native"), "{plan}");
    let plan = explain(
        "SELECT v FROM ticks WHERE sensor = 7 AND ts >= '2026-03-01 00:00+00' \
         AND ts < '2026-03-02 00:00+00'",
    )
    .await;
    assert!(plan.contains("Class: row-range"), "{plan}");
    assert!(
        plan.contains("RowKey >= '2026-03-01T00:00:00.000000Z'"),
        "{plan}"
    );
    let plan = explain("SELECT bal FROM acct WHERE id = 2.5").await;
    assert!(plan.contains("Class: empty"), "{plan}");
    let plan = explain(
        "SELECT hits FROM visits WHERE site = -7 AND day >= '2026-11-01' AND day < '2026-12-01'",
    )
    .await;
    assert!(plan.contains("Class: row-range"), "{plan}");
    assert!(
        plan.contains("PartitionKey = '-99992' (site = -7)")
            && plan.contains("RowKey >= '2026-11-01' (day >= '2026-11-01')"),
        "{plan}"
    );
    // Beyond smallint: no value qualifies, said as below the smallest.
    let plan = explain("SELECT hits FROM visits WHERE site > 40000").await;
    assert!(plan.contains("(site < -32768)"), "{plan}");

    let err = |sql: &'static str| {
        let t = &t;
        async move {
            let e = t.batch_execute(sql).await.expect_err(sql);
            let db = e.as_db_error().expect("a server error");
            (db.code().code().to_owned(), db.message().to_owned())
        }
    };
    let (code, msg) = err("INSERT INTO ticks VALUES (1, '1500-01-01 00:00+00', 1)").await;
    assert_eq!(code, "22008", "{msg}");
    let (code, msg) = err("CREATE TABLE dbl (d double precision PRIMARY KEY)").await;
    assert_eq!(code, "42P16", "{msg}");
    let (code, _) = err("INSERT INTO acct VALUES (NULL, 1, 'x')").await;
    assert_eq!(code, "23502");
    let (code, _) = err("SELECT bal FROM acct WHERE id = 'abc'").await;
    assert_eq!(code, "22P02");
    let (code, msg) = err("INSERT INTO visits VALUES (40000, '2026-01-01', 1)").await;
    assert_eq!(code, "22003", "{msg}");
    assert!(msg.contains("smallint out of range"), "{msg}");
    let (code, _) = err("INSERT INTO visits VALUES (1, 'soon', 1)").await;
    assert_eq!(code, "22P02");
    t.batch_execute("INSERT INTO acct VALUES (7, 1, 'x')")
        .await
        .unwrap();
    // The duplicate is named by the typed key, as PostgreSQL names it.
    let e = t
        .batch_execute("INSERT INTO acct VALUES (7, 2, 'y')")
        .await
        .unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.code().code(), "23505");
    assert_eq!(
        db.message(),
        "duplicate key value violates unique constraint \"acct_pkey\""
    );
    assert_eq!(db.detail(), Some("Key (id)=(7) already exists."));
    let rows = query(&t, "SELECT id, bal FROM acct WHERE id = 7")
        .await
        .unwrap();
    assert_eq!(rows, vec![vec![Some("7".into()), Some("1".into())]]);
}

/// A table without a primary key: a NOTICE at CREATE, hidden keys that
/// `SELECT *` does not show, one session's transaction in one bucket,
/// sessions spread over buckets, and the same rows as PostgreSQL after
/// inserts, updates, deletes and COPY.
#[tokio::test]
async fn tables_without_a_primary_key_work_like_postgresql() {
    let SideBySide { p, s, t, .. } = &SideBySide::start().await;
    let create = "CREATE TABLE logs (at bigint, level text, msg text)";
    p.batch_execute(create).await.unwrap();
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (t2, mut conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    let seen = notices.clone();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = futures::StreamExt::next(&mut messages).await {
            if let tokio_postgres::AsyncMessage::Notice(n) = m {
                seen.lock().unwrap().push(n.message().to_owned());
            }
        }
    });
    t2.batch_execute(create).await.unwrap();
    let notice = notices.lock().unwrap().join("\n");
    assert!(notice.contains("has no primary key"), "{notice}");
    let statements = [
        "INSERT INTO logs VALUES (1, 'info', 'a'), (2, 'warn', 'b'), (3, 'info', NULL)",
        "INSERT INTO logs (level, msg) VALUES ('error', 'c')",
        "BEGIN",
        "INSERT INTO logs VALUES (4, 'info', 'd')",
        "INSERT INTO logs VALUES (5, 'debug', 'e')",
        "COMMIT",
        "UPDATE logs SET level = 'trace' WHERE at >= 4",
        "DELETE FROM logs WHERE msg = 'b'",
        "INSERT INTO logs VALUES (1, 'info', 'a')",
    ];
    for sql in statements {
        p.batch_execute(sql).await.unwrap();
        t.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    for sql in [
        "SELECT at, level, msg FROM logs ORDER BY at, msg",
        "SELECT level, count(*) FROM logs GROUP BY level ORDER BY level",
        "SELECT count(*) FROM logs WHERE msg IS NULL",
    ] {
        assert_eq!(query(p, sql).await, query(t, sql).await, "{sql}");
    }
    // SELECT * shows the declared columns (and the store's timestamp).
    let star = t.prepare("SELECT * FROM logs").await.unwrap();
    let names: Vec<&str> = star.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["at", "level", "msg", "timestamp"]);
    // Sessions spread over buckets; each session keeps to one.
    let mut buckets = std::collections::BTreeSet::new();
    for i in 0..8 {
        let c = connect(&s.conn_str()).await;
        c.batch_execute(&format!(
            "INSERT INTO logs VALUES ({i}, 'x', 's'); INSERT INTO logs VALUES ({i}, 'y', 's')"
        ))
        .await
        .unwrap();
        let rows = query(
            &c,
            &format!("SELECT tg_bucket FROM logs WHERE at = {i} AND msg = 's'"),
        )
        .await
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0], rows[1], "one session, one bucket");
        buckets.insert(rows[0][0].clone());
    }
    assert!(buckets.len() > 1, "8 sessions, one bucket: {buckets:?}");
    let plan = query(t, "EXPLAIN SELECT msg FROM logs WHERE level = 'info'")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("Class: full-scan"), "{plan}");
    assert!(plan.contains("has no primary key"), "{plan}");
}

/// Identity columns (`serial`, `bigserial`, `GENERATED … AS IDENTITY`):
/// the ids PostgreSQL gives on a fresh table, RETURNING, DEFAULT, COPY,
/// transactions, the 428C9 refusal of a value for GENERATED ALWAYS; after a
/// restart ids stay unique and increasing (a gap, as with a sequence's
/// cache).
#[tokio::test]
async fn identity_columns_number_rows_like_postgresql() {
    let pg = PgRef::start();
    let p = connect(&pg.conn_str()).await;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let t = connect(&s.conn_str()).await;
    let statements = [
        "CREATE TABLE items (id serial PRIMARY KEY, name text)",
        "CREATE TABLE lines (tenant text, n bigint GENERATED ALWAYS AS IDENTITY, what text, \
         PRIMARY KEY (tenant, n))",
        "CREATE TABLE notes (k text PRIMARY KEY, seq bigserial, body text)",
        "INSERT INTO items (name) VALUES ('a'), ('b')",
        "INSERT INTO items VALUES (DEFAULT, 'c')",
        "INSERT INTO lines (tenant, what) VALUES ('t1', 'x'), ('t1', 'y')",
        "BEGIN",
        "INSERT INTO lines (tenant, what) VALUES ('t2', 'p')",
        "INSERT INTO lines (tenant, what) VALUES ('t2', 'q')",
        "COMMIT",
        "INSERT INTO notes (k, body) VALUES ('k1', 'one'), ('k2', 'two'), ('k3', NULL)",
        "INSERT INTO notes (k, body) SELECT name, name FROM items WHERE id = 1",
    ];
    for sql in statements {
        p.batch_execute(sql).await.unwrap();
        t.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    let returning = "INSERT INTO items (name) VALUES ('d') RETURNING id, name";
    assert_eq!(query(&p, returning).await, query(&t, returning).await);
    let copy = "COPY lines (tenant, what) FROM STDIN";
    for c in [&p, &t] {
        let sink = c.copy_in(copy).await.unwrap();
        futures::pin_mut!(sink);
        futures::SinkExt::send(&mut sink, bytes::Bytes::from_static(b"t3\tc1\nt3\tc2\n"))
            .await
            .unwrap();
        sink.finish().await.unwrap();
    }
    for sql in [
        "SELECT id, name FROM items ORDER BY id",
        "SELECT tenant, n, what FROM lines ORDER BY n",
        "SELECT k, seq, body FROM notes ORDER BY seq",
    ] {
        assert_eq!(query(&p, sql).await, query(&t, sql).await, "{sql}");
    }
    let refuse = "INSERT INTO lines (tenant, n, what) VALUES ('t1', 50, 'no')";
    let code = |e: tokio_postgres::Error| e.code().map(|c| c.code().to_owned());
    assert_eq!(
        p.batch_execute(refuse).await.map_err(code),
        t.batch_execute(refuse).await.map_err(code)
    );
    assert!(t.batch_execute(refuse).await.is_err());

    // Restart: the ids handed out so far are never handed out again.
    drop(t);
    assert!(s.terminate(), "graceful shutdown");
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let t = connect(&s.conn_str()).await;
    let before: i64 = t
        .query_one("SELECT max(id) FROM items", &[])
        .await
        .unwrap()
        .get::<_, i32>(0)
        .into();
    let after = t
        .query_one("INSERT INTO items (name) VALUES ('e') RETURNING id", &[])
        .await
        .unwrap()
        .get::<_, i32>(0);
    assert!(i64::from(after) > before, "{after} after {before}");
}
