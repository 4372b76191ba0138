//! COPY FROM STDIN / TO STDOUT in text and CSV, through psql's `\copy`
//! and tokio-postgres.

use std::io::Cursor;

use futures::{SinkExt, StreamExt};
use tokio_postgres::NoTls;

use super::server::{TestServer, psql};

const DDL: &str = "CREATE TABLE regs (race text, runner text, name text, age int, \
                   note text DEFAULT 'none', PRIMARY KEY (race, runner))";

#[test]
fn psql_copy_both_ways_in_text_and_csv() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    std::fs::write(
        &input,
        "race,runner,name,age\nboston,BIB:1,\"Ann, Jr\",30\nboston,BIB:2,,\nnyc,BIB:3,\"two\nlines\",41\n",
    )
    .unwrap();
    let out = dir.path().join("out.txt");
    let (stdout, err, ok) = psql(
        &s,
        &[
            DDL,
            &format!(
                "\\copy regs (race, runner, name, age) from '{}' csv header",
                input.display()
            ),
            &format!("\\copy regs to '{}'", out.display()),
            "COPY (SELECT runner, age FROM regs WHERE race = 'boston') TO STDOUT WITH (FORMAT csv, HEADER)",
        ],
    );
    assert!(ok, "{err}");
    assert!(stdout.contains("COPY 3"), "{stdout}");
    assert!(
        err.contains("2 entity-group transactions"),
        "two PartitionKeys, two EGTs: {err}"
    );
    assert!(
        stdout.contains("runner,age\nBIB:1,30\nBIB:2,\n"),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text,
        "boston\tBIB:1\tAnn, Jr\t30\tnone\nboston\tBIB:2\t\\N\t\\N\tnone\nnyc\tBIB:3\ttwo\\nlines\t41\tnone\n"
    );
    // What COPY wrote, COPY reads back (into another table).
    let (_, err, ok) = psql(
        &s,
        &[
            &DDL.replace("regs", "regs2"),
            &format!("\\copy regs2 from '{}'", out.display()),
        ],
    );
    assert!(ok, "{err}");
    let (a, _, _) = psql(&s, &["SELECT race, runner, name, age, note FROM regs"]);
    let (b, _, _) = psql(&s, &["SELECT race, runner, name, age, note FROM regs2"]);
    assert_eq!(a, b);

    // A bad row names its line, and nothing of that COPY is applied.
    let bad = dir.path().join("bad.txt");
    std::fs::write(
        &bad,
        "chicago\tBIB:9\tZed\t22\tx\nchicago\tBIB:10\tZed\told\tx\n",
    )
    .unwrap();
    let (_, err, ok) = psql(&s, &[&format!("\\copy regs from '{}'", bad.display())]);
    assert!(!ok);
    assert!(err.contains("line 2") && err.contains("\"old\""), "{err}");
    let (out, _, _) = psql(&s, &["SELECT runner FROM regs WHERE race = 'chicago'"]);
    assert!(out.contains("(0 rows)"), "{out}");
    // Wrong field counts and server-side files are refused.
    std::fs::write(&bad, "chicago\tBIB:9\n").unwrap();
    let (_, err, _) = psql(&s, &[&format!("\\copy regs from '{}'", bad.display())]);
    assert!(err.contains("missing data for column \"name\""), "{err}");
    let (_, err, ok) = psql(&s, &["COPY regs FROM '/etc/passwd'"]);
    assert!(!ok && err.contains("not allowed"), "{err}");
}

#[tokio::test]
async fn driver_copy_in_and_out() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c.batch_execute(DDL).await.unwrap();
    // 1,000 rows over 5 PartitionKeys, sent in chunks that split rows.
    let mut data = String::new();
    for i in 0..1000 {
        data.push_str(&format!("p{}\tr{i:04}\tname {i}\t{}\t\\N\n", i % 5, i % 90));
    }
    let sink = c.copy_in("COPY regs FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    for chunk in data.as_bytes().chunks(777) {
        sink.send(Cursor::new(chunk.to_vec())).await.unwrap();
    }
    let n = sink.finish().await.unwrap();
    assert_eq!(n, 1000);
    let rows = c
        .query("SELECT runner, age, note FROM regs WHERE race = 'p3'", &[])
        .await
        .unwrap();
    assert_eq!(rows.len(), 200);
    assert!(
        rows[0].get::<_, Option<String>>("note").is_none(),
        "\\N is NULL, not the DEFAULT"
    );

    // An existing key fails the COPY with 23505.
    let sink = c
        .copy_in("COPY regs (race, runner) FROM STDIN")
        .await
        .unwrap();
    futures::pin_mut!(sink);
    sink.send(Cursor::new(b"p0\tr0000\n".to_vec()))
        .await
        .unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "23505", "{e:?}");

    let out = c
        .copy_out("COPY regs (race, runner, age) TO STDOUT WITH (FORMAT csv)")
        .await
        .unwrap();
    futures::pin_mut!(out);
    let mut text = Vec::new();
    while let Some(chunk) = out.next().await {
        text.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8(text).unwrap();
    assert_eq!(text.lines().count(), 1000);
    assert!(
        text.starts_with("p0,r0000,0\np0,r0005,5\n"),
        "{}",
        &text[..40]
    );
}

/// COPY into a table with a local index (with INCLUDE) and a global one
/// answers every query as COPY into the same table without indexes, the
/// indexes used or not; a second COPY over an existing key fails with
/// 23505 on both alike. The planner's differential test covers the
/// statement forms.
#[tokio::test]
async fn copy_into_indexed_tables_answers_as_into_plain_ones() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let ddl = |t: &str| {
        format!(
            "CREATE TABLE {t} (race text, runner text, name text, age int, note text, PRIMARY KEY (race, runner))"
        )
    };
    c.batch_execute(&format!(
        "{}; {}; CREATE INDEX cix_age ON cix_indexed (age) INCLUDE (name); \
         CREATE INDEX cix_name ON cix_indexed (name) GLOBAL",
        ddl("cix_indexed"),
        ddl("cix_plain")
    ))
    .await
    .unwrap();
    let mut data = String::new();
    for i in 0..600 {
        let name = if i % 7 == 0 {
            "\\N".to_owned()
        } else {
            format!("n{}", i % 40)
        };
        data.push_str(&format!("p{}\tr{i:04}\t{name}\t{}\tx\n", i % 4, i % 50));
    }
    for t in ["cix_indexed", "cix_plain"] {
        let sink = c.copy_in(&format!("COPY {t} FROM STDIN")).await.unwrap();
        futures::pin_mut!(sink);
        for chunk in data.as_bytes().chunks(1000) {
            sink.send(Cursor::new(chunk.to_vec())).await.unwrap();
        }
        assert_eq!(sink.finish().await.unwrap(), 600);
        // Over a key already there.
        let sink = c.copy_in(&format!("COPY {t} FROM STDIN")).await.unwrap();
        futures::pin_mut!(sink);
        sink.send(Cursor::new(
            b"p9\tnew\tz\t1\tx\np1\tr0001\tz\t1\tx\n".to_vec(),
        ))
        .await
        .unwrap();
        let err = sink.finish().await.unwrap_err();
        assert_eq!(err.code().map(|c| c.code()), Some("23505"), "{err}");
    }
    let text = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> Vec<String> {
        rows.into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("NULL").to_owned())
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect()
    };
    let queries = [
        "SELECT runner, name FROM {t} WHERE race = 'p1' AND age = 7 ORDER BY runner",
        "SELECT runner, age, name FROM {t} WHERE race = 'p2' AND age >= 45 ORDER BY runner",
        "SELECT runner FROM {t} WHERE race = 'p3' AND age < 3 AND name LIKE 'n1%' ORDER BY runner",
        "SELECT race, runner, age FROM {t} WHERE name = 'n13' ORDER BY race, runner",
        "SELECT count(*) FROM {t} WHERE race = 'p0'",
        "SELECT count(*) FROM {t}",
    ];
    for q in queries {
        let plain = text(
            c.simple_query(&q.replace("{t}", "cix_plain"))
                .await
                .unwrap(),
        );
        assert!(!plain.is_empty(), "{q}");
        for mode in ["force", "on", "off"] {
            c.batch_execute(&format!("SET tablegate.use_indexes = {mode}"))
                .await
                .unwrap();
            let got = text(
                c.simple_query(&q.replace("{t}", "cix_indexed"))
                    .await
                    .unwrap(),
            );
            assert_eq!(got, plain, "{q} (use_indexes = {mode})");
        }
    }
}

/// A COPY of several flushes (10,000 rows each) writes one flush while it
/// parses the next, and still answers as if it wrote them in turn: every
/// row once, and when the first flush fails its error is the one given,
/// with the line its rows end at, even though a later line was already
/// found malformed; nothing after the failed flush is written.
#[tokio::test]
async fn copy_over_several_flushes_counts_and_fails_in_input_order() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c.batch_execute("CREATE TABLE pipe (pk text, rk text, v int, PRIMARY KEY (pk, rk))")
        .await
        .unwrap();
    let rows = |range: std::ops::Range<usize>, bad: Option<usize>| -> String {
        range
            .map(|i| match bad {
                Some(b) if b == i => format!("p{}\tr{i:06}\tnot a number\n", i / 1000),
                _ => format!("p{}\tr{i:06}\t{i}\n", i / 1000),
            })
            .collect()
    };
    let copy = |text: String| {
        let c = &c;
        async move {
            let sink = c.copy_in("COPY pipe FROM STDIN").await.unwrap();
            futures::pin_mut!(sink);
            for chunk in text.as_bytes().chunks(64 << 10) {
                sink.send(Cursor::new(chunk.to_vec())).await.unwrap();
            }
            sink.finish().await
        }
    };
    assert_eq!(copy(rows(0..35_000, None)).await.unwrap(), 35_000);
    let count = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    assert_eq!(count("SELECT count(*) FROM pipe").await, 35_000);
    assert_eq!(
        count("SELECT sum(v)::bigint FROM pipe").await,
        (0..35_000i64).sum::<i64>()
    );

    // Rows 40,001.. into new partitions after a first line that repeats a
    // key already stored (the first flush fails); line 15,001 does not
    // parse.
    let mut text = String::from("p0\tr000100\t1\n");
    text.push_str(&rows(40_001..65_000, Some(55_000)));
    let err = copy(text).await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "23505", "{err:?}");
    let detail = db.detail().unwrap_or_default();
    assert!(detail.contains("rows up to line 10000"), "{detail}");
    assert_eq!(
        count("SELECT count(*) FROM pipe WHERE rk >= 'r050000'").await,
        0
    );

    // The same when the malformed line is the last, without its newline
    // (found only once the data has ended, while the first flush runs).
    let mut text = String::from("p0\tr000100\t1\n");
    text.push_str(&rows(40_001..55_000, None));
    text.push_str("p99\tr099999\tnot a number");
    let err = copy(text).await.unwrap_err();
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "23505", "{err:?}");
    assert_eq!(
        count("SELECT count(*) FROM pipe WHERE rk >= 'r050000'").await,
        0
    );
}

/// U+0000 is not text to PostgreSQL: a parameter or a COPY line holding it
/// is refused with 22021 as PostgreSQL refuses it, and nothing of that COPY
/// is written; let through, a parameter holding it would become a key bound
/// the store cannot hold.
#[tokio::test]
async fn text_holding_nul_is_refused_as_postgresql_refuses_it() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c.batch_execute(
        "CREATE TABLE nul (pk text, rk text, v int, PRIMARY KEY (pk, rk));
         INSERT INTO nul VALUES ('a', 'b', 1)",
    )
    .await
    .unwrap();
    let refused = |e: tokio_postgres::Error| {
        let db = e.as_db_error().expect("a server error");
        (db.code().code().to_owned(), db.message().to_owned())
    };
    let sql = "SELECT v FROM nul WHERE pk > $1";
    let (code, msg) = refused(c.query(sql, &[&"a\0"]).await.expect_err("a NUL parameter"));
    assert_eq!(code, "22021", "{msg}");
    assert!(msg.contains("0x00") && msg.contains("$1"), "{msg}");
    assert!(c.query(sql, &[&"a"]).await.unwrap().is_empty());
    let ge = "SELECT v FROM nul WHERE pk >= $1";
    assert_eq!(c.query(ge, &[&"a"]).await.unwrap().len(), 1);

    let sink = c.copy_in("COPY nul FROM STDIN").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(Cursor::new(b"c\td\t2\nc\0x\te\t3\n".to_vec()))
        .await
        .unwrap();
    let (code, msg) = refused(sink.finish().await.expect_err("a NUL in COPY"));
    assert_eq!(code, "22021", "{msg}");
    assert!(msg.contains("0x00") && msg.contains("line 2"), "{msg}");
    let n: i64 = c
        .query_one("SELECT count(*) FROM nul", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}
