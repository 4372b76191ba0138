//! A tokio-postgres client of tablegate: the seeds' race-registration
//! schema, each runner written as two rows (`BIB:` and `AGE:` RowKeys) in
//! one transaction, which tablegate runs as one entity-group transaction.
//!
//! It retries what the server says to retry, and nothing else:
//! SQLSTATE 53000 (a partition over its scalability target) and 40001 (a
//! conflicting commit), with the seeds' exponential backoff
//! `y = Rand(0.8z, 1.2z)·(2^x − 1); delay = min(zmin + y, zmax)`. Client
//! errors (23505, 22023, 42xxx, 0A000, 54000, ...) are reported at once:
//! retrying them cannot succeed.
//!
//! Run the demo in one terminal (`cargo run -- demo`), then:
//!
//! ```sh
//! cargo run --example race_client -- "host=127.0.0.1 port=5433 user=tablegate dbname=tablegate" --runners 50
//! ```

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

const RACE: &str = "2026 Boston Marathon__Full";
const NAMES: [&str; 6] = ["Ana", "Bo", "Chen", "Dara", "Eli", "Femi"];

/// The seeds' backoff: z = 100 ms, zmin = 20 ms, zmax = 2 s.
fn backoff(retry: u32, jitter: f64) -> Duration {
    let z = 0.100 * (0.8 + 0.4 * jitter);
    let y = z * (2f64.powi(retry as i32) - 1.0);
    Duration::from_secs_f64((0.020 + y).min(2.0))
}

/// Jitter in [0, 1) without a random-number crate.
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

#[derive(Debug, Default)]
struct Retries {
    busy: u32,
    conflicts: u32,
}

/// One runner: both rows in one transaction, retried on 53000 / 40001.
async fn register(
    client: &mut Client,
    bib: i32,
    retries: &mut Retries,
) -> Result<(), tokio_postgres::Error> {
    let name = NAMES[bib as usize % NAMES.len()];
    let gender = if bib % 2 == 0 { "F" } else { "M" };
    let age = 20 + bib % 50;
    let bib_key = format!("BIB:{bib:05}__{name}__{gender}__{age}");
    let age_key = format!("AGE:{age:03}__{bib:05}__{name}__{gender}");
    let mut attempt = 0;
    loop {
        let result = async {
            let tx = client.transaction().await?;
            for key in [&bib_key, &age_key] {
                tx.execute(
                    "INSERT INTO race_regs (race, runner, bib, name, gender, age) VALUES ($1, $2, $3, $4, $5, $6)",
                    &[&RACE, key, &bib, &name, &gender, &age],
                )
                .await?;
            }
            tx.commit().await
        }
        .await;
        let Err(e) = result else { return Ok(()) };
        // No ROLLBACK needed: a failed INSERT's transaction is rolled back
        // when `tx` drops, and a failed COMMIT has ended its transaction.
        let code = e.code().cloned();
        let retryable = code == Some(SqlState::from_code("53000"))
            || code == Some(SqlState::T_R_SERIALIZATION_FAILURE);
        attempt += 1;
        if !retryable || attempt > 6 {
            return Err(e);
        }
        if code == Some(SqlState::T_R_SERIALIZATION_FAILURE) {
            retries.conflicts += 1;
        } else {
            retries.busy += 1;
        }
        tokio::time::sleep(backoff(attempt, jitter())).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut conn = std::env::var("TABLEGATE_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 port=5433 user=tablegate dbname=tablegate".into());
    let mut runners = 50;
    let mut bad_key = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runners" => runners = args.next().ok_or("--runners N")?.parse()?,
            // Shows that a client error is not retried.
            "--bad-key" => bad_key = true,
            other => conn = other.to_owned(),
        }
    }
    let (mut client, connection) = tokio_postgres::connect(&conn, NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS race_regs (race TEXT, runner TEXT, bib INTEGER, \
             name TEXT, gender TEXT, age INTEGER, PRIMARY KEY (race, runner))",
        )
        .await?;
    // Throttled requests come back as 53000 at once; this client backs off.
    client
        .batch_execute("SET tablegate.retry_policy = none")
        .await?;

    if bad_key {
        // '#' is forbidden in Azure keys: 22023, a client error.
        let e = client
            .execute(
                "INSERT INTO race_regs (race, runner) VALUES ($1, 'BIB:#1')",
                &[&RACE],
            )
            .await
            .expect_err("a forbidden key character is refused");
        let code = e.code().map_or("?", |c| c.code()).to_owned();
        println!("client error {code} not retried");
        std::process::exit(1);
    }

    let mut retries = Retries::default();
    let mut registered = 0;
    for bib in 0..runners {
        match register(&mut client, bib, &mut retries).await {
            Ok(()) => registered += 1,
            // Already registered by an earlier run: not an error here.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
            Err(e) => return Err(e.into()),
        }
    }

    // The reads below are not wrapped in the retry loop: let the server
    // retry them with its own policy (exponential, 5 retries) instead.
    client.batch_execute("RESET tablegate.retry_policy").await?;

    // A point query on the BIB: row, a row-range query on the AGE: rows.
    let bib0 = format!("BIB:00000__{}__F__20", NAMES[0]);
    let row = client
        .query_one(
            "SELECT name, age FROM race_regs WHERE race = $1 AND runner = $2",
            &[&RACE, &bib0],
        )
        .await?;
    let thirties = client
        .query(
            "SELECT runner FROM race_regs WHERE race = $1 AND runner >= 'AGE:030' AND runner < 'AGE:040'",
            &[&RACE],
        )
        .await?;
    let total: i64 = client
        .query_one("SELECT count(*) FROM race_regs WHERE race = $1", &[&RACE])
        .await?
        .get(0);
    println!(
        "runner 0: {} ({}); {} runners in their thirties; {total} rows in the partition",
        row.get::<_, String>(0),
        row.get::<_, i32>(1),
        thirties.len()
    );
    println!(
        "race_client ok: registered={registered} rows={} retries_53000={} conflicts_40001={}",
        total, retries.busy, retries.conflicts
    );
    Ok(())
}
