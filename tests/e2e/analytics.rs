//! The analytics engine against PostgreSQL 15: the same generated data in
//! both, the same analytic queries, the same results (order-insensitive
//! where the query has no ORDER BY; floating point within a tolerance).

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::pgref::SideBySide;
use super::rng::Rng;
use super::server::TestServer;

const SCHEMA: &[&str] = &[
    "CREATE TABLE runners (race text, runner text, name text, age int, city text, \
     score double precision, joined timestamptz, PRIMARY KEY (race, runner))",
    "CREATE TABLE races (race text PRIMARY KEY, title text, distance_km double precision, \
     starts timestamptz)",
];

const QUERIES: &[&str] = &[
    // integer arithmetic that stays in range
    "SELECT 9223372036854775800 + 5 + 2, -9223372036854775807 - 1",
    "SELECT r.age * r.age * r.age * r.age FROM runners r JOIN races c ON r.race = c.race ORDER BY 1 DESC LIMIT 3",
    // integer literals are integer, in arithmetic too, and the same
    // expression in GROUP BY or ORDER BY still matches its select item
    "SELECT 7 / 2, -7 / 2, 7 % 3, 2147483647 + 0, pg_typeof(1 + 1), pg_typeof(age * 2), \
     pg_typeof(CASE WHEN age > 1 THEN 1 ELSE 0 END) FROM runners LIMIT 1",
    "SELECT to_hex(-1), to_hex(255), to_hex(-1::bigint), to_hex(age - 100), to_hex(age::bigint - 100) \
     FROM runners ORDER BY age LIMIT 1",
    "SELECT x, pg_typeof(x) FROM (VALUES (1), (2)) AS v(x)",
    "SELECT x, pg_typeof(x) FROM (VALUES (1), (3000000000)) AS v(x)",
    "SELECT age + 1 AS next, count(*) FROM runners GROUP BY age + 1 ORDER BY age + 1",
    "SELECT DISTINCT age * 2 FROM runners ORDER BY age * 2",
    "SELECT CASE WHEN age > 40 THEN 1 ELSE 0 END AS senior, count(*) FROM runners \
     GROUP BY CASE WHEN age > 40 THEN 1 ELSE 0 END",
    // sum(bigint) is numeric: totals past 2^63 are exact, not wrapped
    "SELECT sum(age::bigint * 100000000000000000), pg_typeof(sum(count)) AS a, \
     pg_typeof(sum(age)) AS b FROM (SELECT *, count(*) OVER () AS count FROM runners) AS r",
    "SELECT race, sum(age::bigint * 100000000000000000) OVER (PARTITION BY race) FROM runners",
    "SELECT race, sum(age::bigint * 100000000000000000) FROM runners GROUP BY race",
    "SELECT sum(n) FROM (SELECT count(*) AS n FROM runners GROUP BY race) AS c",
    // functions taking integer (oid) arguments take an integer literal
    "SELECT pg_get_userbyid(10), format_type(23, -1), format_type(25, NULL)",
    // aggregates
    "SELECT count(*) FROM runners",
    "SELECT count(*), min(age), max(age), sum(age) FROM runners",
    "SELECT avg(age) FROM runners",
    "SELECT avg(score), stddev(score) FROM runners WHERE race = 'boston'",
    "SELECT count(city), count(DISTINCT city) FROM runners",
    "SELECT sum(score) FROM runners WHERE age > 40",
    "SELECT max(name), min(name) FROM runners WHERE race >= 'c'",
    "SELECT count(*) FROM runners WHERE city IS NULL",
    "SELECT bool_and(age > 10), bool_or(age > 70) FROM runners",
    // GROUP BY / HAVING
    "SELECT race, count(*) FROM runners GROUP BY race",
    "SELECT race, avg(age), max(score) FROM runners GROUP BY race",
    "SELECT city, count(*) FROM runners GROUP BY city HAVING count(*) > 50",
    "SELECT race, city, count(*) FROM runners GROUP BY race, city",
    "SELECT age / 10 AS decade, count(*) FROM runners GROUP BY age / 10",
    "SELECT race, sum(age) FROM runners WHERE race = 'nyc' GROUP BY race",
    "SELECT city, min(joined), max(joined) FROM runners GROUP BY city",
    "SELECT race, count(*) FILTER (WHERE age >= 50) FROM runners GROUP BY race",
    // ORDER BY / LIMIT on non-key columns, DISTINCT
    "SELECT name, age FROM runners ORDER BY age DESC, race, runner LIMIT 10",
    "SELECT race, runner, score FROM runners ORDER BY score, race, runner LIMIT 5 OFFSET 3",
    "SELECT DISTINCT city FROM runners",
    "SELECT DISTINCT race, city FROM runners WHERE age < 30",
    "SELECT runner FROM runners WHERE race = 'boston' ORDER BY name, runner",
    // ORDER BY an output name: an aggregate's alias, and a renamed column
    "SELECT race, count(*) AS n FROM runners GROUP BY race ORDER BY n DESC, race",
    "SELECT runner AS who, age FROM runners WHERE race = 'boston' ORDER BY who DESC LIMIT 5",
    "SELECT race AS runner, runner AS race FROM runners WHERE age > 75 ORDER BY runner, race",
    "SELECT count(*) FROM (SELECT DISTINCT age FROM runners) t",
    // joins between two tablegate tables
    "SELECT r.title, count(*) FROM runners u JOIN races r ON u.race = r.race GROUP BY r.title",
    "SELECT u.runner, r.distance_km FROM runners u JOIN races r ON u.race = r.race WHERE u.age = 33",
    "SELECT r.race, count(u.runner) FROM races r LEFT JOIN runners u ON u.race = r.race GROUP BY r.race",
    "SELECT r.title, sum(r.distance_km) FROM races r JOIN runners u ON u.race = r.race WHERE u.city = 'Paris' GROUP BY r.title",
    "SELECT a.runner, b.runner FROM runners a JOIN runners b ON a.name = b.name AND a.race < b.race WHERE a.age > 75",
    // window functions
    "SELECT race, runner, rank() OVER (PARTITION BY race ORDER BY age DESC, runner) FROM runners WHERE age > 70",
    "SELECT race, runner, row_number() OVER (ORDER BY score DESC, race, runner) FROM runners WHERE score > 95",
    "SELECT race, runner, sum(age) OVER (PARTITION BY race ORDER BY runner) FROM runners WHERE race = 'chicago'",
    "SELECT race, avg(age) OVER (PARTITION BY race) FROM runners WHERE city = 'Oslo'",
    "SELECT runner, lag(age) OVER (ORDER BY runner) FROM runners WHERE race = 'boston'",
    // CTEs and subqueries
    "WITH old AS (SELECT * FROM runners WHERE age >= 60) SELECT race, count(*) FROM old GROUP BY race",
    "WITH per AS (SELECT race, avg(score) AS s FROM runners GROUP BY race) SELECT race FROM per WHERE s > 50",
    "SELECT runner FROM runners WHERE age = (SELECT max(age) FROM runners)",
    "SELECT race, runner FROM runners WHERE race IN (SELECT race FROM races WHERE distance_km > 20) AND age > 75",
    "SELECT title FROM races r WHERE EXISTS (SELECT 1 FROM runners u WHERE u.race = r.race AND u.age < 20)",
    "SELECT count(*) FROM runners WHERE score > (SELECT avg(score) FROM runners)",
    "SELECT t.race, t.n FROM (SELECT race, count(*) AS n FROM runners GROUP BY race) t WHERE t.n > 1",
    // scalar subqueries in the select list, correlated and not ('paris'
    // has no runners: count is 0, max is NULL)
    "SELECT r.race, (SELECT max(u.age) FROM runners u WHERE u.race = r.race) AS oldest FROM races r",
    "SELECT r.race, (SELECT count(*) FROM runners u WHERE u.race = r.race) AS n FROM races r",
    "SELECT r.race, (SELECT count(*) FROM runners u WHERE u.race = r.race AND u.age > 79) + 1 FROM races r",
    "SELECT r.race, coalesce((SELECT sum(u.age) FROM runners u WHERE u.race = r.race AND u.city IS NULL), -1) FROM races r",
    "SELECT r.race, (SELECT avg(u.score) FROM runners u WHERE u.race = r.race AND u.city = 'Oslo') AS s FROM races r",
    "SELECT t.race, t.n FROM (SELECT r.race, (SELECT count(*) FROM runners u WHERE u.race = r.race) AS n FROM races r) t WHERE t.n = 0",
    "SELECT (SELECT max(age) FROM runners) AS oldest, (SELECT count(*) FROM races) AS races",
    "SELECT race, (SELECT title FROM races WHERE race = 'oslo') FROM runners WHERE age = 17",
    // correlated by other comparisons than equality (decorrelated by a
    // join on the outer columns they read): counts of none are 0, NULL
    // outer values match nothing, two subqueries and two outer columns
    "SELECT u.runner, (SELECT count(*) FROM runners v WHERE v.age > u.age AND v.race = 'nyc') AS older FROM runners u WHERE u.race = 'boston' ORDER BY 1",
    "SELECT u.runner, (SELECT max(v.score) FROM runners v WHERE v.age < u.age AND v.city <> u.city), (SELECT min(v.age) FROM runners v WHERE v.score > u.score) FROM runners u WHERE u.race = 'oslo' ORDER BY 1",
    "SELECT r.race, (SELECT count(*) FROM runners u WHERE u.race <> r.race AND u.age > 78) FROM races r ORDER BY 1",
    "SELECT r.race FROM races r WHERE (SELECT count(*) FROM runners u WHERE u.race > r.race) > 100 ORDER BY 1",
    "SELECT u.city, (SELECT count(*) FROM runners v WHERE v.city < u.city) FROM runners u WHERE u.race = 'nyc' AND u.age < 30 ORDER BY 1 NULLS FIRST, 2",
    "SELECT count(*) FROM runners u WHERE (SELECT avg(v.score) FROM runners v WHERE v.age BETWEEN u.age - 1 AND u.age + 1) > u.score",
    // correlated subqueries in WHERE and HAVING
    "SELECT race, runner FROM runners u WHERE age = (SELECT max(v.age) FROM runners v WHERE v.race = u.race)",
    "SELECT r.race FROM races r WHERE (SELECT count(*) FROM runners u WHERE u.race = r.race) = 0",
    "SELECT r.race FROM races r WHERE NOT EXISTS (SELECT 1 FROM runners u WHERE u.race = r.race)",
    "SELECT r.race FROM races r WHERE r.race NOT IN (SELECT u.race FROM runners u WHERE u.age > 79)",
    "SELECT race, count(*) FROM runners GROUP BY race HAVING count(*) > (SELECT count(*) FROM races) * 40",
    // set operations
    "SELECT race FROM runners WHERE age > 78 UNION SELECT race FROM races WHERE distance_km < 10",
    "SELECT city FROM runners WHERE race = 'boston' INTERSECT SELECT city FROM runners WHERE race = 'nyc'",
    "SELECT race FROM races EXCEPT SELECT race FROM runners WHERE age > 79",
    // string functions
    "SELECT upper(name), length(city) FROM runners WHERE race = 'nyc' AND age > 70",
    "SELECT substr(runner, 1, 4), count(*) FROM runners GROUP BY substr(runner, 1, 4)",
    "SELECT name || '@' || city FROM runners WHERE age = 44",
    "SELECT lower(city), count(*) FROM runners WHERE city LIKE 'P%' GROUP BY lower(city)",
    "SELECT replace(name, 'a', 'A') FROM runners WHERE age = 25",
    "SELECT trim(both ' ' from '  x  ') || name FROM runners WHERE age = 31",
    "SELECT coalesce(city, 'none'), count(*) FROM runners GROUP BY coalesce(city, 'none')",
    // date functions and arithmetic
    "SELECT date_trunc('month', joined) AS m, count(*) FROM runners GROUP BY date_trunc('month', joined)",
    "SELECT extract(year FROM joined), count(*) FROM runners GROUP BY extract(year FROM joined)",
    "SELECT race, min(starts) FROM races GROUP BY race",
    "SELECT count(*) FROM runners WHERE joined >= '2026-03-01' AND joined < '2026-04-01'",
    "SELECT runner, age * 2 + 1, score / 2 FROM runners WHERE race = 'berlin' AND age < 22",
    "SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END AS band, count(*) FROM runners GROUP BY 1",
    "SELECT round(avg(score)::numeric, 2) FROM runners",
    "SELECT abs(age - 50), count(*) FROM runners WHERE race = 'nyc' GROUP BY abs(age - 50)",
    // row values over the keys (native point lookups and spans) and NULLs in them
    "SELECT race, runner, age FROM runners WHERE (race, runner) IN (('nyc', 'BIB:0007'), ('oslo', 'BIB:0299'), ('nyc', 'BIB:9999'))",
    "SELECT count(*) FROM runners WHERE (race, runner) NOT IN (('nyc', 'BIB:0007'), ('oslo', 'BIB:0299'))",
    "SELECT race, runner FROM runners WHERE (race, runner) IN (('nyc', 'BIB:0007'), ('boston', NULL))",
    "SELECT count(*) FROM runners WHERE (race, runner) NOT IN (('nyc', 'BIB:0007'), ('boston', NULL))",
    "SELECT race, runner FROM runners WHERE (race, age) IN (('nyc', 33), ('berlin', 70))",
    "SELECT count(*) FROM runners WHERE (race, runner) > ('nyc', NULL)",
    "SELECT count(*) FROM runners WHERE (race, runner) = ('nyc', NULL)",
    "SELECT count(*) FROM runners WHERE race NOT IN ('nyc', 'oslo') AND runner < 'BIB:0100'",
    // literals: numeric arithmetic is exact, wide literals still work
    "SELECT 0.1 + 0.2 = 0.3, 1.50, 2.5 * 4, 10 / 4.0",
    "SELECT count(*) FROM runners WHERE score > 50.25",
    "SELECT race, sum(age) * 1.5 FROM runners GROUP BY race",
    "SELECT count(*) FROM runners WHERE score * 1e300 > 1e301",
    "SELECT 1, -2, 3000000000, 1 AS one UNION ALL SELECT 4, 5, 6, 7",
    // timestamps as PostgreSQL reads them (no seconds, a short offset)
    "SELECT count(*) FROM runners WHERE joined >= '2026-03-01 12:00+00'",
    "SELECT race, count(*) FROM runners WHERE joined < '2026-02-01 00:00+01' GROUP BY race",
];

/// The data: a small PRNG, the same rows in both databases.
fn rows() -> (Vec<String>, Vec<String>) {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.next();
    let races = [
        ("berlin", "Berlin Marathon", 42.195),
        ("boston", "Boston Marathon", 42.195),
        ("chicago", "Chicago Half", 21.1),
        ("nyc", "New York City Marathon", 42.195),
        ("oslo", "Oslo 10K", 10.0),
        ("paris", "Paris 5K", 5.0),
    ];
    let cities = ["Paris", "Oslo", "Boston", "Lyon", "Porto", "Pune"];
    let names = [
        "ana", "bob", "cai", "dee", "eli", "fay", "gus", "hal", "ivy", "jon",
    ];
    let race_rows = races
        .iter()
        .enumerate()
        .map(|(i, (r, t, d))| format!("('{r}', '{t}', {d}, '2026-0{}-1{} 09:00:00+00')", i + 1, i))
        .collect();
    let mut runner_rows = Vec::new();
    for (r, _, _) in &races[..5] {
        for i in 0..300 {
            let age = 15 + next() % 66;
            let city = if next() % 10 == 0 {
                "NULL".to_owned()
            } else {
                format!("'{}'", cities[(next() % 6) as usize])
            };
            let score = (next() % 10_000) as f64 / 100.0;
            let month = 1 + next() % 6;
            let day = 1 + next() % 28;
            runner_rows.push(format!(
                "('{r}', 'BIB:{i:04}', '{}', {age}, {city}, {score}, '2026-{month:02}-{day:02} {:02}:00:00+00')",
                names[(next() % 10) as usize],
                next() % 24
            ));
        }
    }
    (runner_rows, race_rows)
}

async fn load(c: &Client) {
    for ddl in SCHEMA {
        c.batch_execute(ddl).await.unwrap();
    }
    let (runners, races) = rows();
    for chunk in runners.chunks(100) {
        c.batch_execute(&format!("INSERT INTO runners VALUES {}", chunk.join(", ")))
            .await
            .unwrap();
    }
    c.batch_execute(&format!("INSERT INTO races VALUES {}", races.join(", ")))
        .await
        .unwrap();
}

async fn query(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let msgs = c.simple_query(sql).await.map_err(|e| format!("{e:?}"))?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(normalize)).collect())
            }
            _ => None,
        })
        .collect())
}

/// Text both servers print the same way once normalized.
fn normalize(v: &str) -> String {
    v.replace("+00:00", "+00")
}

fn same(a: &Option<String>, b: &Option<String>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) if x != y => match (x.parse::<f64>(), y.parse::<f64>()) {
            (Ok(p), Ok(q)) => (p - q).abs() <= 1e-9 * p.abs().max(q.abs()).max(1.0),
            _ => false,
        },
        _ => a == b,
    }
}

#[tokio::test]
async fn analytic_queries_match_postgresql() {
    let SideBySide { p, t, .. } = &SideBySide::start().await;
    load(p).await;
    load(t).await;
    assert!(QUERIES.len() >= 50);
    let mut failures = Vec::new();
    for sql in QUERIES {
        let want = query(p, sql)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL: {sql}: {e}"));
        let got = match query(t, sql).await {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{sql}\n  tablegate error: {e}"));
                continue;
            }
        };
        let ordered = sql.to_ascii_uppercase().contains("ORDER BY")
            && !sql.to_ascii_uppercase().contains(" OVER (");
        let (mut want, mut got) = (want, got);
        if !ordered {
            want.sort();
            got.sort();
        }
        let ok = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(a, b)| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y)));
        if !ok {
            failures.push(format!(
                "{sql}\n  postgres ({} rows): {:?}\n  tablegate ({} rows): {:?}",
                want.len(),
                want.iter().take(5).collect::<Vec<_>>(),
                got.len(),
                got.iter().take(5).collect::<Vec<_>>()
            ));
        }
    }
    // Errors PostgreSQL gives, with its SQLSTATE.
    for sql in ERRORS {
        let code = |e: String| {
            e.split("code: SqlState(")
                .nth(1)
                .map(|c| c[..c.find(')').unwrap_or(0)].to_owned())
        };
        let want = query(p, sql).await.map_err(code);
        let got = query(t, sql).await.map_err(code);
        if want.is_ok() || want != got {
            failures.push(format!("{sql}\n  postgres: {want:?}\n  tablegate: {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        QUERIES.len() + ERRORS.len(),
        failures.join("\n")
    );
}

/// The types of literal result columns, as the RowDescription says them:
/// `SELECT 1` is integer (drivers hand a bigint back as a string), `1.5`
/// numeric.
#[tokio::test]
async fn literal_result_types_match_postgresql() {
    let SideBySide { p, t, .. } = &SideBySide::start().await;
    let sql = "SELECT 1 AS a, -7 AS b, 3000000000 AS c, 1.5 AS d, 1.50 AS e, 'x' AS f, \
               true AS g, 2147483648 AS h, -2147483648 AS i, 1 + 1 AS j, 7 / 2 AS k, \
               CASE WHEN true THEN 1 ELSE 0 END AS l, 3000000000 + 1 AS m, 1 + 1.5 AS n, \
               -(3) AS o, 2 * 3 - 1 AS q";
    let types = |st: tokio_postgres::Statement| {
        st.columns()
            .iter()
            .map(|c| format!("{} {}", c.name(), c.type_().name()))
            .collect::<Vec<_>>()
    };
    let want = types(p.prepare(sql).await.unwrap());
    let got = types(t.prepare(sql).await.unwrap());
    assert_eq!(got, want);
    let row = t.query_one("SELECT 1, 1.50", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 1);
    let text = t.simple_query("SELECT 1.50").await.unwrap();
    match &text[1] {
        SimpleQueryMessage::Row(r) => assert_eq!(r.get(0), Some("1.50")),
        other => panic!("{other:?}"),
    }
}

/// Statements both must refuse, with the same SQLSTATE.
const ERRORS: &[&str] = &[
    // A scalar subquery with a second row (not the first row of it).
    "SELECT (SELECT age FROM runners) FROM races",
    "SELECT race FROM races WHERE race = (SELECT race FROM runners WHERE age > 20)",
    // Integer arithmetic past its type's range is refused (22003), not
    // wrapped around: in constants, select lists, filters and aggregate
    // arguments (age^6 passes 2^31 from age 36; ages are 15 to 80).
    "SELECT 9223372036854775807 + 1",
    "SELECT -9223372036854775807 - 2 - 1",
    "SELECT r.age * r.age * r.age * r.age * r.age * r.age FROM runners r JOIN races c ON r.race = c.race",
    "SELECT count(*) FROM runners r JOIN races c ON r.race = c.race WHERE r.age * r.age * r.age * r.age * r.age * r.age > 0",
    "SELECT sum(r.age * r.age * r.age * r.age * r.age * r.age) FROM runners r JOIN races c ON r.race = c.race",
    // integer (int4) arithmetic and casts past int4's range
    "SELECT 2147483647 + 1",
    "SELECT 100000 * 100000",
    "SELECT max(age) * 100000000 FROM runners",
    "SELECT 10000000000::int",
    "SELECT 100000::smallint",
];

#[tokio::test]
async fn timeout_and_cancel_stop_engine_execution() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "20"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    // A three-way cross join of the demo table: hundreds of millions of rows.
    let heavy = "SELECT count(*) FROM registrations a, registrations b, registrations c";
    c.batch_execute("SET statement_timeout = 300")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let e = c.simple_query(heavy).await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "57014", "{e:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    c.batch_execute("SET statement_timeout = 0").await.unwrap();
    let token = c.cancel_token();
    let cancel = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let e = c.simple_query(heavy).await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().code().code(), "57014", "{e:?}");
    cancel.await.unwrap();
    // The session still works.
    let rows = c
        .simple_query("SELECT count(*) FROM registrations")
        .await
        .unwrap();
    assert!(rows.len() >= 2);
}
