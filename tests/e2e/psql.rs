//! With the real `psql`.

use std::process::Command;

use super::server::{TestServer, psql, psql_command};

const NYC: &str = "2026 New York City Marathon__Full";

#[test]
fn psql_queries_explain_and_errors() {
    let s = TestServer::demo(&["--throttle", "off"]);
    // A row-range query finds the runners aged 30-39 of one race.
    // A subquery runs in the analytics engine, which knows its columns.
    let (out, err, ok) = psql(&s, &["SELECT count_me FROM (SELECT 1) x"]);
    assert!(!ok, "{out}");
    assert!(err.contains("42703") || err.contains("count_me"), "{err}");
    let (out, err, ok) = psql(
        &s,
        &[&format!(
            "SELECT count(*) AS n, max(age) FROM registrations WHERE race = '{NYC}'"
        )],
    );
    assert!(ok, "{err}");
    assert!(out.contains(" n ") && out.contains("(1 row)"), "{out}");

    let (out, err, ok) = psql(
        &s,
        &[&format!(
            "SELECT runner, name, age FROM registrations WHERE race = '{NYC}' AND runner LIKE 'AGE:03%'"
        )],
    );
    assert!(ok, "{err}");
    let rows: Vec<&str> = out.lines().filter(|l| l.contains("AGE:03")).collect();
    assert!(!rows.is_empty(), "{out}");
    assert!(out.contains(&format!("({} row", rows.len())), "{out}");

    // The four classes show in EXPLAIN.
    for (sql, class) in [
        (
            format!("SELECT * FROM registrations WHERE race = '{NYC}' AND runner = 'BIB:00001__x'"),
            "point",
        ),
        (
            format!("SELECT * FROM registrations WHERE race = '{NYC}'"),
            "row-range",
        ),
        (
            "SELECT * FROM registrations WHERE race LIKE '2026 New York%'".to_owned(),
            "partition-range",
        ),
        (
            "SELECT * FROM registrations WHERE age > 40".to_owned(),
            "full-scan",
        ),
        (
            "SELECT * FROM registrations WHERE race = 'a' AND race = 'b'".to_owned(),
            "empty",
        ),
    ] {
        let (out, err, ok) = psql(&s, &[&format!("EXPLAIN {sql}")]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("Class: {class} ")), "{sql}: {out}");
    }
    let (out, _, ok) = psql(
        &s,
        &[&format!(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM registrations WHERE race = '{NYC}'"
        )],
    );
    assert!(ok);
    assert!(out.contains("\"Actual Entities Scanned\": 40"), "{out}");

    // Errors carry SQLSTATEs, positions and hints.
    let (_, err, ok) = psql(
        &s,
        &["\\set VERBOSITY verbose", "SELECT nope FROM registrations"],
    );
    assert!(!ok);
    assert!(
        err.contains("42703") && err.contains("column \"nope\" does not exist"),
        "{err}"
    );
    let (_, err, _) = psql(
        &s,
        &["\\set VERBOSITY verbose", "SELECT * FROM missing_table"],
    );
    assert!(err.contains("42P01"), "{err}");
    let (_, err, _) = psql(&s, &["\\set VERBOSITY verbose", "SELEC 1"]);
    assert!(err.contains("42601"), "{err}");
    let (_, err, _) = psql(
        &s,
        &[
            "\\set VERBOSITY verbose",
            "SELECT * FROM registrations WHERE race = 5",
        ],
    );
    assert!(err.contains("42883") && err.contains("HINT"), "{err}");
    let (_, err, ok) = psql(
        &s,
        &[
            "SET tablegate.allow_full_scan = off",
            "\\set VERBOSITY verbose",
            "SELECT name FROM registrations WHERE age = 30",
        ],
    );
    assert!(!ok);
    assert!(
        err.contains("TG001") && err.contains("add a condition on race"),
        "{err}"
    );

    // Session settings and version.
    let (out, err, ok) = psql(
        &s,
        &[
            "SET statement_timeout = '5s'",
            "SHOW statement_timeout",
            "SELECT version()",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("5000") && out.contains("PostgreSQL 15.0 (tablegate"),
        "{out}"
    );

    // DDL: create, IF NOT EXISTS notice, drop.
    let (out, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE notes (author TEXT, at TEXT, body TEXT, PRIMARY KEY (author, at))",
            "CREATE TABLE IF NOT EXISTS notes (author TEXT PRIMARY KEY)",
            "SELECT * FROM notes",
            "DROP TABLE notes",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("CREATE TABLE") && out.contains("DROP TABLE") && out.contains("(0 rows)"),
        "{out}"
    );
    assert!(err.contains("already exists, skipping"), "{err}");
    let (_, err, ok) = psql(&s, &["CREATE TABLE bad (id REAL PRIMARY KEY)"]);
    assert!(
        !ok && err.contains("key column \"id\" is double precision"),
        "{err}"
    );

    // psql's FETCH_COUNT pages through a cursor (DECLARE / FETCH FORWARD n).
    let (out, err, ok) = psql(
        &s,
        &[
            "\\set FETCH_COUNT 7",
            &format!("SELECT runner FROM registrations WHERE race = '{NYC}'"),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("BIB:") || l.contains("AGE:"))
            .count(),
        40,
        "{out}"
    );
    // Expanded display.
    let (out, _, ok) = psql(
        &s,
        &[
            "\\x on",
            &format!("SELECT name, age FROM registrations WHERE race = '{NYC}' LIMIT 1"),
        ],
    );
    assert!(
        ok && out.contains("-[ RECORD 1 ]") && out.contains("name |"),
        "{out}"
    );

    assert!(s.terminate(), "graceful shutdown on SIGTERM");
}

/// `\\di`, `\\d`'s "Indexes:", `pg_indexes`, `pg_index` and
/// `pg_get_indexdef` against PostgreSQL 15 on the same table and indexes.
/// The only difference: the primary key is the store's clustered index
/// (rows are kept in its order), which psql marks CLUSTER.
#[test]
fn psql_shows_indexes_as_postgresql_does() {
    let pg = super::pgref::PgRef::start();
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let commands = [
        "CREATE TABLE ix_notes (pk text, rk text, body text, n bigint, PRIMARY KEY (pk, rk))",
        "CREATE INDEX ix_notes_body ON ix_notes (body, n)",
        "CREATE UNIQUE INDEX ix_notes_n ON ix_notes (n)",
        "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE tablename = 'ix_notes' ORDER BY indexname",
        "SELECT c.relname, c.relkind, i.indnatts, i.indisunique, i.indisprimary, i.indisvalid, \
         pg_get_indexdef(i.indexrelid), pg_get_indexdef(i.indexrelid, 2, true) \
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid \
         WHERE t.relname = 'ix_notes' ORDER BY c.relname",
        "SELECT t.relname, t.relhasindex FROM pg_class t WHERE t.relname = 'ix_notes'",
        "\\d ix_notes",
        "\\di ix_notes*",
        // A user table named like an information_schema table.
        "CREATE TABLE columns (pk text, rk text, v int, PRIMARY KEY (pk, rk))",
        "CREATE INDEX columns_v ON columns (v)",
        "SELECT indexname AS columns_index, indexdef FROM pg_indexes WHERE tablename = 'columns' ORDER BY 1",
        "SELECT conname AS columns_constraint, contype FROM pg_constraint c \
         JOIN pg_class t ON t.oid = c.conrelid WHERE t.relname = 'columns'",
    ];
    let run = |mut cmd: Command| {
        cmd.args(["-X", "-v", "ON_ERROR_STOP=1"]);
        for c in commands {
            cmd.args(["-c", c]);
        }
        let out = cmd.output().expect("psql is installed");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let mut cmd = Command::new("psql");
    cmd.arg(pg.conn_str());
    let want = run(cmd);
    let got = run(psql_command(&s));
    // Sections that do not depend on column storage or owner names.
    let section = |out: &str, from: &str, to: &str| -> String {
        let start = out.find(from).unwrap_or_else(|| panic!("{from} in {out}"));
        let rest = &out[start..];
        rest[..rest.find(to).unwrap_or(rest.len())].to_owned()
    };
    for (from, to) in [
        (" indexname ", "(3 rows)"),
        ("   relname   ", "(3 rows)"),
        (" relname  | relhasindex", "(1 row)"),
        (" columns_index ", "(2 rows)"),
        (" columns_constraint ", "(1 row)"),
    ] {
        assert_eq!(section(&got, from, to), section(&want, from, to), "{got}");
    }
    let indexes = |out: &str| section(out, "Indexes:", "\n\n").replace(" CLUSTER", "");
    assert_eq!(indexes(&got), indexes(&want), "{got}");
    assert!(
        got.contains("\"ix_notes_pkey\" PRIMARY KEY, btree (pk, rk) CLUSTER"),
        "{got}"
    );
    // \di: name, type and table of each index (owners differ).
    let listed = |out: &str| -> Vec<String> {
        section(out, "List of relations", "(3 rows)")
            .lines()
            .filter(|l| l.contains("| index"))
            .map(|l| {
                let f: Vec<&str> = l.split('|').map(str::trim).collect();
                format!("{} {} {}", f[1], f[2], f[4])
            })
            .collect()
    };
    assert_eq!(listed(&got), listed(&want), "{got}");
    assert_eq!(listed(&got).len(), 3, "{got}");
}

#[test]
fn psql_describes_tables_databases_and_schemas() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE notes (pk text, rk text, body text, n bigint DEFAULT 7, PRIMARY KEY (pk, rk))",
            "\\dt",
            "\\d notes",
            "\\l",
            "\\dn",
        ],
    );
    assert!(ok, "{err}");
    // \dt lists both tables; \d shows the columns with PostgreSQL types.
    assert!(
        out.contains("registrations") && out.contains("notes"),
        "{out}"
    );
    assert!(out.contains("Table \"public.notes\""), "{out}");
    assert!(out.contains("bigint") && out.contains("not null"), "{out}");
    assert!(
        out.contains("List of databases") && out.contains("tablegate"),
        "{out}"
    );
    assert!(
        out.contains("List of schemas") && out.contains("public"),
        "{out}"
    );
    // The describe commands people type, verbose forms included: each
    // answers (ON_ERROR_STOP) with its heading, as PostgreSQL's does.
    for (command, heading) in [
        ("\\d+ notes", "Table \"public.notes\""),
        ("\\dt+", "List of relations"),
        ("\\di", "List of relations"),
        ("\\di+", "List of relations"),
        ("\\dv+", "List of relations"),
        ("\\df", "List of functions"),
        ("\\dT", "List of data types"),
        ("\\du", "List of roles"),
        ("\\dp", "Access privileges"),
        ("\\z", "Access privileges"),
        ("\\dn+", "List of schemas"),
        ("\\l+", "List of databases"),
        ("\\do", "List of operators"),
        ("\\dc", "List of conversions"),
        ("\\dC", "List of casts"),
        ("\\dD", "List of domains"),
        ("\\dx", "List of installed extensions"),
        ("\\dO", "List of collations"),
        ("\\dL", "List of languages"),
        ("\\db", "List of tablespaces"),
        ("\\deu", "List of user mappings"),
        ("\\drds", "settings"),
        ("\\dX", "List of extended statistics"),
        ("\\dconfig", "configuration parameters"),
        ("\\dg", "List of roles"),
        ("\\conninfo", "You are connected to database \"tablegate\""),
    ] {
        let (out, err, ok) = psql(&s, &[command]);
        assert!(ok, "{command}: {err}");
        assert!(
            out.contains(heading) || err.contains(heading),
            "{command}: {out}{err}"
        );
    }
    let (out, _, _) = psql(&s, &["\\d+ notes"]);
    assert!(
        out.contains("Access method") || out.contains("Storage"),
        "{out}"
    );
    let (out, _, _) = psql(&s, &["\\dt+"]);
    assert!(out.contains("notes") && out.contains("Size"), "{out}");
    // Expanded display of an engine query.
    let (out, err, ok) = psql(
        &s,
        &[
            "\\x on",
            "SELECT count(*) AS n, min(race) FROM registrations",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("-[ RECORD 1 ]") && out.contains("n   |"),
        "{out}"
    );
}

/// SQL-level PREPARE / EXECUTE / DEALLOCATE, as psql users write them: a
/// point query, an aggregate (the analytics engine) and an INSERT, with
/// PostgreSQL's errors for a missing, duplicate or wrongly called statement.
#[test]
fn psql_prepare_and_execute() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "2"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "\\set VERBOSITY verbose",
            "PREPARE one AS SELECT name, age FROM registrations WHERE race = $1 AND runner LIKE $2",
            &format!("EXECUTE one('{NYC}', 'BIB:00001%')"),
            "PREPARE per_race (text) AS SELECT count(*) FROM registrations WHERE race = $1",
            &format!("EXECUTE per_race('{NYC}')"),
            "CREATE TABLE notes (k text, r text, n int, PRIMARY KEY (k, r))",
            "PREPARE add AS INSERT INTO notes VALUES ($1, $2, $3)",
            "EXECUTE add('a', 'x', -7)",
            "EXECUTE add('a', 'y', NULL)",
            "SELECT r, n FROM notes WHERE k = 'a'",
            "DEALLOCATE add",
            // Parameters are bound before classification: the spans show
            // the values (LIKE's `_` is a wildcard, so a prefix span).
            "PREPARE look AS SELECT name FROM registrations WHERE race = $1 AND runner LIKE $2",
            &format!("EXPLAIN EXECUTE look('{NYC}', 'BIB:00001__x')"),
            "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE look('2026%', 'BIB:%')",
            &format!("EXPLAIN ANALYZE EXECUTE per_race('{NYC}')"),
        ],
    );
    assert!(ok, "{err}");
    let blocks: Vec<&str> = out.split("\n\n").collect();
    assert!(out.contains("(1 row)"), "{out}");
    assert!(
        out.contains(" 4\n"),
        "two runners, BIB: and AGE: rows: {out}"
    );
    assert!(
        out.contains(" x | -7") && out.contains(" y |   "),
        "{blocks:?}"
    );
    assert!(out.contains("Class: row-range "), "{out}");
    assert!(
        out.contains("RowKey >= 'BIB:00001' AND RowKey < 'BIB:00002'"),
        "{out}"
    );
    assert!(
        out.contains("\"Class\": \"row-range\"") && out.contains("\"Actual Entities Scanned\": 0"),
        "no race named '2026%': {out}"
    );
    assert!(
        out.contains("StoreScanExec") || out.contains("Store Scan"),
        "the aggregate's engine plan: {out}"
    );
    for (commands, code) in [
        (vec!["EXECUTE nope"], "26000"),
        (vec!["DEALLOCATE gone", "EXECUTE gone"], "26000"),
        (
            vec!["PREPARE d AS SELECT 1", "PREPARE d AS SELECT 2"],
            "42P05",
        ),
        (
            vec![
                "PREPARE p2 AS SELECT * FROM registrations WHERE race = $1",
                "EXECUTE p2",
            ],
            "42601",
        ),
        (
            vec![
                "PREPARE p3 AS SELECT * FROM registrations WHERE race = $1 AND age = $2",
                "EXECUTE p3('x', 'old')",
            ],
            "22P02",
        ),
    ] {
        let mut all = vec!["\\set VERBOSITY verbose"];
        all.extend(commands.iter().copied());
        let (_, err, ok) = psql(&s, &all);
        assert!(!ok && err.contains(code), "{commands:?}: {err}");
    }
}

/// psql without `-h` reaches the server through the Unix-domain socket,
/// as it reaches PostgreSQL (`/var/run/postgresql/.s.PGSQL.<port>` on
/// Debian); Ctrl-C's cancel travels the same way; a graceful stop removes
/// the socket file.
#[test]
fn psql_connects_through_the_unix_socket() {
    let dir = std::path::Path::new("/var/run/postgresql");
    std::fs::create_dir_all(dir).unwrap();
    let s = TestServer::demo(&[
        "--throttle",
        "off",
        "--unix-socket-dir",
        "/var/run/postgresql",
    ]);
    let socket = dir.join(format!(".s.PGSQL.{}", s.port));
    assert!(socket.exists(), "{}", socket.display());
    let out = std::process::Command::new("psql")
        .args([
            "-X",
            "-p",
            &s.port.to_string(),
            "-U",
            "tablegate",
            "tablegate",
        ])
        .args([
            "-c",
            "\\conninfo",
            "-c",
            "SELECT count(*) FROM registrations",
        ])
        .env_remove("PGHOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("via socket in \"/var/run/postgresql\""),
        "{stdout}"
    );
    assert!(stdout.contains("(1 row)"), "{stdout}");
    // A cancel request over the socket stops a running statement.
    let mut slow = std::process::Command::new("psql")
        .args(["-X", "-p", &s.port.to_string(), "-U", "tablegate", "tablegate"])
        .args(["-c", "SELECT count(*) FROM registrations a, registrations b, registrations c, registrations d"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Time for psql to start and send it on loaded cores (a SIGINT before
    // that has no statement to cancel); the join runs for minutes.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SIGINT is psql's Ctrl-C: it sends a CancelRequest.
    assert!(
        std::process::Command::new("kill")
            .args(["-INT", &slow.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let started = std::time::Instant::now();
    let mut err = String::new();
    std::io::Read::read_to_string(slow.stderr.as_mut().unwrap(), &mut err).unwrap();
    slow.wait().unwrap();
    assert!(err.contains("canceling statement"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(s.terminate(), "graceful shutdown on SIGTERM");
    assert!(!socket.exists(), "the socket file outlived the server");
}

/// The same through a socket directory given as psql's host.
#[test]
fn psql_connects_through_a_socket_directory() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let out = std::process::Command::new("psql")
        .args(["-X", "-h"])
        .arg(s.socket_dir.path())
        .args(["-p", &s.port.to_string(), "-U", "tablegate", "tablegate"])
        .args(["-c", "SELECT 40 + 2 AS answer"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("42"), "{stdout}");
}

/// Object sizes come from the store's byte statistics: they follow
/// inserts, updates and deletes, survive a restart, answer by name and by
/// `pg_class` oid, fill `\dt+`'s Size column, and refuse what PostgreSQL
/// refuses with its SQLSTATEs.
#[test]
fn object_sizes_come_from_store_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let value = |s: &TestServer, sql: &str| -> String {
        let (out, err, ok) = psql(
            s,
            &["\\pset tuples_only on", "\\pset format unaligned", sql],
        );
        assert!(ok, "{sql}: {err}");
        out.lines().last().unwrap_or_default().to_owned()
    };
    let size =
        |s: &TestServer| -> i64 { value(s, "SELECT pg_table_size('notes')").parse().unwrap() };
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (_, err, ok) = psql(
        &s,
        &["CREATE TABLE notes (pk text, rk int, body text, PRIMARY KEY (pk, rk))"],
    );
    assert!(ok, "{err}");
    assert_eq!(size(&s), 0);

    let (_, err, ok) = psql(
        &s,
        &[
            "INSERT INTO notes SELECT 'p' || (n % 4), n, repeat('x', 200) FROM generate_series(1, 100) AS g(n)",
        ],
    );
    assert!(ok, "{err}");
    let full = size(&s);
    // 100 bodies of 200 bytes, plus keys and framing.
    assert!((20_000..40_000).contains(&full), "{full}");
    assert_eq!(
        value(
            &s,
            "SELECT pg_total_relation_size('public.notes') = pg_table_size('NOTES') \
             AND pg_relation_size('notes', 'main') = pg_table_size('\"notes\"') \
             AND pg_relation_size('notes', 'fsm') = 0 AND pg_indexes_size('notes') = 0"
        ),
        "t"
    );
    // By oid, as psql's \dt+ asks; the database holds the demo-less table.
    assert_eq!(
        value(
            &s,
            "SELECT pg_table_size(c.oid) FROM pg_class c WHERE c.relname = 'notes'"
        ),
        full.to_string()
    );
    assert_eq!(
        value(&s, "SELECT pg_database_size(current_database())"),
        full.to_string()
    );
    assert_eq!(
        value(&s, "SELECT pg_typeof(pg_table_size('notes'))"),
        "bigint"
    );
    assert_eq!(value(&s, "SELECT pg_table_size(4000000000) IS NULL"), "t");
    let (out, err, ok) = psql(&s, &["\\dt+ notes"]);
    assert!(ok, "{err}");
    assert!(out.contains(" kB "), "{out}");

    // Shorter bodies shrink it by what they lose; deletes take the rest.
    let (_, err, ok) = psql(&s, &["UPDATE notes SET body = 'short' WHERE pk = 'p1'"]);
    assert!(ok, "{err}");
    assert_eq!(size(&s), full - 25 * 195);
    let (_, err, ok) = psql(&s, &["DELETE FROM notes WHERE pk <> 'p2'"]);
    assert!(ok, "{err}");
    let kept = size(&s);
    assert!(kept > 0 && kept < full / 3, "{kept} of {full}");
    assert!(s.terminate());

    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    assert_eq!(size(&s), kept, "the statistic is durable");

    for (sql, code) in [
        ("SELECT pg_table_size('nosuch')", "42P01"),
        ("SELECT pg_relation_size('notes', 'heap')", "22023"),
        ("SELECT pg_database_size('nosuch')", "3D000"),
        ("SELECT pg_table_size('nosuch.notes')", "3F000"),
        ("SELECT pg_table_size('a b')", "42602"),
    ] {
        let (_, err, ok) = psql(&s, &["\\set VERBOSITY verbose", sql]);
        assert!(!ok && err.contains(code), "{sql}: {err}");
    }
}
