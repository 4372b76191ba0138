//! Binary-format results of analytics queries, compared with PostgreSQL 15.
//!
//! The same generated rows go into tablegate and into a throwaway
//! PostgreSQL 15; each query runs through tokio-postgres on both, which
//! asks for every result column in binary. The column type OIDs must match,
//! and so must the values, decoded from the raw bytes by the small decoders
//! below into a canonical text that keeps every field of the wire layout
//! (numeric digit groups, weight, sign and dscale; interval micros, days and
//! months; array dimensions, lower bounds, null flag and element OID). The
//! same queries then run again in text format (simple protocol), compared
//! exactly.
//!
//! Where DataFusion's type differs from PostgreSQL's, the query casts
//! explicitly so both sides give the same type:
//! - `avg(int)` is float8 in DataFusion and numeric in PostgreSQL: the
//!   queries average `CAST(n AS DOUBLE PRECISION)` instead;
//! - `sum(bigint)` is bigint in DataFusion and numeric in PostgreSQL: cast
//!   to BIGINT;
//! - decimal division and `avg(numeric)` have different result scales:
//!   cast to an explicit `DECIMAL(p,s)`;
//! - a bare `1.5` literal is float8 in DataFusion and numeric in
//!   PostgreSQL: numeric constants are written `CAST('…' AS DECIMAL(p,s))`;
//! - integer literals are bigint in DataFusion (`n / 3` is int8, int4 in
//!   PostgreSQL) and a real times an integer literal stays real (float8 in
//!   PostgreSQL): the literals are cast to INT or REAL.
//!
//! Left out because one side cannot run them or the types cannot be made to
//! match (no assertion was weakened for them):
//! - numeric NaN and ±Infinity: DataFusion's decimals have none (casting a
//!   float NaN to DECIMAL fails), so only finite numerics are compared;
//! - arrays of numeric, date, timestamp or uuid, and two-dimensional
//!   arrays: DataFusion's lists of those are sent as text[] (only int2/4/8,
//!   float4/8, bool and text element types map one to one);
//! - `CAST('…' AS TIMESTAMPTZ)` of a literal: DataFusion types it without a
//!   zone (timestamp), so timestamptz values come from a timestamptz column;
//! - interval literals in PostgreSQL's `04:05:06` form (DataFusion cannot
//!   parse them) — the same intervals are written in words;
//! - `array_remove` of a value that occurs more than once (DataFusion
//!   removes the first only), of NULL (DataFusion returns NULL) and of a
//!   grouped column (DataFusion does not remove): empty arrays come from
//!   removing the one element of `ARRAY[x]`;
//! - `extract` (numeric in PostgreSQL 15, float8 in DataFusion);
//! - `stddev`, and float sums over NaN/±Infinity (the last bits, and a
//!   NaN's sign bit, depend on the summation order);
//! - two aggregates over the same column in one query when only a cast
//!   tells them apart (`sum(n)` and `sum(CAST(n AS …))`): DataFusion names
//!   both alike and refuses the duplicate, so they are in separate queries.
//!
//! The binary format of parameters is checked too: int4, int8, float8,
//! bool, timestamptz and timestamp parameters bound in binary by
//! tokio-postgres, with a NULL among them; and bytea and uuid parameters
//! in binary (their raw bytes) through a native INSERT, read back. Not
//! numeric, date or uuid in analytics statements: the engine describes
//! such parameters as text, so tokio-postgres cannot bind them in binary.

use std::fmt::Write as _;

use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

use super::pgref::SideBySide;
use super::rng::Rng;

const SCHEMA: &str = "CREATE TABLE vals (pk text, rk text, n int, big bigint, \
     f double precision, ok boolean, s text, ts timestamptz, lt timestamp, id uuid, \
     raw bytea, PRIMARY KEY (pk, rk))";

/// Partitions `p0`..`p3` hold generated rows with finite floats (multiples
/// of 0.25, so float sums and averages are exact in any order); `p9` holds
/// the special floats (NaN, ±Infinity, -0), which only projections, sign
/// flips, casts and array_agg see.
const QUERIES: &[&str] = &[
    // int2 / int4 / int8, bool
    "SELECT pk, count(*), count(n), sum(n), min(n), max(big), CAST(sum(big) AS BIGINT) AS sb \
     FROM vals GROUP BY pk ORDER BY pk",
    "SELECT min(n)::smallint AS a, CAST(max(n) AS SMALLINT) AS b, count(DISTINCT s) AS c, \
     bool_and(ok) AS d, bool_or(ok) AS e, bool_and(n > -100) AS f FROM vals",
    "SELECT pk, rk, CAST(n AS SMALLINT) AS a, n / CAST(3 AS INT) AS b, \
     n % CAST(7 AS INT) AS c, abs(n) AS d, big * 2 AS e, n > 0 AS f, s IS NULL AS g, ok AS h \
     FROM vals WHERE pk < 'p9' ORDER BY pk, rk",
    "SELECT pk, bool_and(ok) AS a, bool_or(ok) AS b, min(big) AS c, \
     max(n) FILTER (WHERE false) AS d FROM vals GROUP BY pk ORDER BY pk",
    // float4 / float8, NaN, ±Infinity, -0
    "SELECT pk, rk, f, -f AS g, CAST(f AS REAL) AS r, -CAST(f AS REAL) AS nr FROM vals \
     ORDER BY pk, rk",
    "SELECT 'NaN'::float8 AS a, 'Infinity'::float8 AS b, '-Infinity'::float8 AS c, \
     '-0'::float8 AS d, CAST('NaN' AS REAL) AS e, CAST('-Infinity' AS REAL) AS g, \
     CAST(0.1 AS REAL) AS h, CAST(1e20 AS DOUBLE PRECISION) AS i",
    "SELECT pk, sum(f) AS a, avg(f) AS b, min(f) AS c, max(f) AS d, \
     avg(CAST(n AS DOUBLE PRECISION)) AS e FROM vals WHERE pk < 'p9' GROUP BY pk ORDER BY pk",
    "SELECT pk, rk, f / 4 AS a, f * 1e300 AS b, CAST(f AS REAL) * CAST(3 AS REAL) AS c FROM vals \
     WHERE pk < 'p9' ORDER BY pk, rk",
    // numeric
    "SELECT pk, CAST(sum(n) AS NUMERIC(12,2)) AS a, sum(CAST(big AS DECIMAL(20,3))) AS b, \
     CAST(avg(CAST(n AS DECIMAL(10,2))) AS DECIMAL(12,4)) AS c FROM vals GROUP BY pk ORDER BY pk",
    "SELECT pk, rk, CAST(n AS DECIMAL(10,3)) AS a, CAST(big AS DECIMAL(20,0)) AS b, \
     CAST(big AS DECIMAL(20,2)) * CAST(n AS DECIMAL(5,1)) AS c, \
     CAST(CAST(n AS DECIMAL(10,3)) / 7 AS DECIMAL(12,5)) AS d, CAST(f AS DECIMAL(12,2)) AS e \
     FROM vals WHERE pk < 'p9' ORDER BY pk, rk",
    "SELECT CAST('0.0001' AS DECIMAL(10,4)) AS a, CAST('-0.00001234' AS DECIMAL(12,8)) AS b, \
     CAST('-123456789.5' AS DECIMAL(12,1)) AS c, CAST('0' AS DECIMAL(5,2)) AS d, \
     CAST('-0.00' AS DECIMAL(5,2)) AS e, CAST('10000.0000' AS DECIMAL(12,4)) AS f, \
     CAST('100000000' AS DECIMAL(20,0)) AS g, CAST('12345.678' AS DECIMAL(12,4)) AS h, \
     CAST('123456789012345678.901234' AS DECIMAL(30,6)) AS i, \
     CAST('99999999999999999999999999999999999999' AS DECIMAL(38,0)) AS j, \
     CAST('-0.5' AS DECIMAL(3,1)) AS k, CAST('9999.9999' AS DECIMAL(8,4)) AS l",
    "SELECT pk, sum(CAST(big AS DECIMAL(20,2))) OVER (PARTITION BY pk) AS a, \
     CAST(f AS DECIMAL(12,2)) - CAST(n AS DECIMAL(10,3)) AS b FROM vals WHERE pk < 'p9' \
     ORDER BY pk, rk",
    // interval
    "SELECT interval '3 months' AS a, interval '-1 day' AS b, interval '1.5 seconds' AS c, \
     interval '2 years' AS d, interval '36 hours' AS e, interval '1 day 2 hours' AS f, \
     interval '1 year 2 months 3 days 4 hours 5 minutes 6.5 seconds' AS g, \
     interval '-90 minutes' AS h, interval '0 seconds' AS i",
    "SELECT pk, max(ts) - min(ts) AS a, min(ts) - max(ts) AS b, max(lt) - min(lt) AS c \
     FROM vals GROUP BY pk ORDER BY pk",
    "SELECT pk, rk, ts - lag(ts) OVER (PARTITION BY pk ORDER BY rk) AS a, \
     ts - date_trunc('day', ts) AS b, lt - date_trunc('year', lt) AS c FROM vals ORDER BY pk, rk",
    // timestamp / timestamptz
    "SELECT pk, rk, ts, lt, date_trunc('hour', ts) AS a, date_trunc('month', lt) AS b, \
     CAST(ts AS TIMESTAMP) AS c FROM vals ORDER BY pk, rk",
    "SELECT pk, rk, ts + interval '1 month' AS a, lt - interval '1 year 1 day' AS b, \
     ts + interval '90 minutes' AS c FROM vals ORDER BY pk, rk",
    "SELECT pk, min(ts) AS a, max(ts) AS b, min(lt) AS c, max(lt) AS d FROM vals \
     GROUP BY pk ORDER BY pk",
    // date
    "SELECT pk, rk, CAST(ts AS DATE) AS a, CAST(lt AS DATE) AS b, CAST(lt AS DATE) - 1 AS c, \
     CAST(date_trunc('month', ts) AS DATE) AS d FROM vals ORDER BY pk, rk",
    "SELECT make_date(2024, 2, 29) AS a, make_date(1999, 12, 31) AS b, make_date(1900, 1, 1) AS c, \
     make_date(2000, 1, 1) AS d, make_date(1970, 1, 1) AS e",
    "SELECT pk, min(CAST(ts AS DATE)) AS a, max(CAST(lt AS DATE)) AS b FROM vals \
     GROUP BY pk ORDER BY pk",
    // time
    "SELECT pk, rk, CAST(lt AS TIME) AS a, CAST(ts AS TIME) AS b FROM vals ORDER BY pk, rk",
    "SELECT CAST('23:59:59.999999' AS TIME) AS a, CAST('00:00:00' AS TIME) AS b, \
     CAST('12:34:56.5' AS TIME) AS c",
    // text, bytea, uuid
    "SELECT pk, rk, s, upper(s) AS u, s || '!' AS e, coalesce(s, '-') AS c, length(s) AS l, \
     id, raw FROM vals ORDER BY pk, rk",
    // arrays
    "SELECT pk, array_agg(n ORDER BY rk) AS a, array_agg(big ORDER BY rk) AS b, \
     array_agg(f ORDER BY rk) AS c FROM vals GROUP BY pk ORDER BY pk",
    "SELECT pk, array_agg(CAST(n AS SMALLINT) ORDER BY rk) AS a, \
     array_agg(CAST(f AS REAL) ORDER BY rk) AS b, array_agg(s ORDER BY rk) AS c, \
     array_agg(ok ORDER BY rk) AS d FROM vals GROUP BY pk ORDER BY pk",
    // Empty arrays (the one element removed) of each element type, and
    // arrays with NULL elements from the ARRAY constructor.
    "SELECT pk, rk, array_remove(ARRAY[n], n) AS a, array_remove(ARRAY[big], big) AS b, \
     array_remove(ARRAY[CAST(n AS SMALLINT)], CAST(n AS SMALLINT)) AS c, \
     array_remove(ARRAY[f], f) AS d, array_remove(ARRAY[CAST(f AS REAL)], CAST(f AS REAL)) AS e, \
     array_remove(ARRAY[s], s) AS g, array_remove(ARRAY[ok], ok) AS h, \
     ARRAY[n, NULL] AS i, ARRAY[NULL, s] AS j, ARRAY[f, NULL, -f] AS k \
     FROM vals WHERE pk < 'p9' AND n IS NOT NULL AND big IS NOT NULL AND f IS NOT NULL \
     AND s IS NOT NULL AND ok IS NOT NULL ORDER BY pk, rk",
    "SELECT array_agg(n ORDER BY rk) FILTER (WHERE n > 1000) AS a, \
     array_agg(s ORDER BY rk) FILTER (WHERE false) AS b FROM vals",
    // NULLs
    "SELECT NULL AS a, CAST(NULL AS INT) AS b, CAST(NULL AS DATE) AS c, \
     CAST(NULL AS DECIMAL(5,2)) AS d, CAST(NULL AS DOUBLE PRECISION) AS e, \
     CAST(NULL AS BIGINT) AS f, CAST(NULL AS BOOLEAN) AS g, CAST(NULL AS TEXT) AS h",
    // window functions (bigint in PostgreSQL)
    "SELECT pk, rk, row_number() OVER (ORDER BY pk, rk) AS a, \
     rank() OVER (PARTITION BY pk ORDER BY ok) AS b, \
     sum(n) OVER (PARTITION BY pk ORDER BY rk) AS c FROM vals ORDER BY pk, rk",
];

/// A small PRNG: the same rows in both databases.
fn rows() -> Vec<String> {
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next();
    let texts = [
        "ana",
        "a b",
        "x,y",
        "q\"t",
        "",
        "élan",
        "NULL",
        "{br}",
        "back\\slash",
    ];
    let mut out = Vec::new();
    for p in 0..4 {
        for r in 0..15 {
            let nul = |v: String, x: u64| {
                if x.is_multiple_of(7) {
                    "NULL".to_owned()
                } else {
                    v
                }
            };
            let n = nul(format!("{}", (next() % 101) as i64 - 50), next());
            let big = nul(
                format!(
                    "{}",
                    (next() % 2_000_000_000_000) as i64 - 1_000_000_000_000
                ),
                next(),
            );
            let f = nul(
                format!("{}", ((next() % 800) as f64 - 400.0) * 0.25),
                next(),
            );
            let ok = ["true", "false", "NULL"][(next() % 3) as usize];
            let s = nul(
                format!("'{}'", texts[(next() % texts.len() as u64) as usize]),
                next(),
            );
            let micros = next() % 1_000_000;
            let ts = format!(
                "'{}-{:02}-{:02} {:02}:{:02}:{:02}.{micros:06}+00'",
                1995 + next() % 35,
                1 + next() % 12,
                1 + next() % 28,
                next() % 24,
                next() % 60,
                next() % 60
            );
            let lt = format!(
                "'{}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}'",
                1965 + next() % 70,
                1 + next() % 12,
                1 + next() % 28,
                next() % 24,
                next() % 60,
                next() % 60,
                next() % 1000
            );
            let h = format!("{:016x}{:016x}", next(), next());
            let id = nul(
                format!(
                    "'{}-{}-{}-{}-{}'",
                    &h[..8],
                    &h[8..12],
                    &h[12..16],
                    &h[16..20],
                    &h[20..]
                ),
                next(),
            );
            let len = (next() % 5) as usize;
            let raw = nul(
                format!(
                    "'\\x{}'",
                    (0..len)
                        .map(|_| format!("{:02x}", next() % 256))
                        .collect::<String>()
                ),
                next(),
            );
            out.push(format!(
                "('p{p}', 'r{r:02}', {n}, {big}, {f}, {ok}, {s}, {ts}, {lt}, {id}, {raw})"
            ));
        }
    }
    // The special floats, beside the usual values, in their own partition.
    for (r, f) in [
        "'NaN'",
        "'Infinity'",
        "'-Infinity'",
        "'-0'",
        "0",
        "NULL",
        "0.5",
    ]
    .iter()
    .enumerate()
    {
        out.push(format!(
            "('p9', 's{r}', {r}, {r}, {f}, true, 's', '2000-01-01 00:00:00+00', \
             '2000-01-01 00:00:00', NULL, NULL)"
        ));
    }
    out
}

async fn load(c: &Client) {
    c.batch_execute(SCHEMA).await.unwrap();
    for chunk in rows().chunks(20) {
        c.batch_execute(&format!("INSERT INTO vals VALUES {}", chunk.join(", ")))
            .await
            .unwrap();
    }
}

/// A value of any type, as the raw bytes the server sent.
struct Raw(Option<Vec<u8>>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(
        _ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw.to_vec())))
    }

    fn from_sql_null(_ty: &Type) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }
}

/// Reads big-endian integers off the front of a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
    }
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    /// Nothing may follow a value.
    fn end<T>(&self, v: T) -> Option<T> {
        self.0.is_empty().then_some(v)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// A value's canonical text: every field of its binary layout, readable.
/// `None` (SQL NULL) is "NULL"; bytes that do not parse are shown in hex.
fn canonical(oid: u32, v: Option<&[u8]>) -> String {
    match v {
        None => "NULL".into(),
        Some(b) => decode(oid, b).unwrap_or_else(|| format!("malformed oid {oid}: {}", hex(b))),
    }
}

fn decode(oid: u32, b: &[u8]) -> Option<String> {
    let mut r = Reader(b);
    let s = match oid {
        16 => match r.take::<1>()?[0] {
            0 => "f".to_owned(),
            1 => "t".to_owned(),
            x => format!("bool {x}"),
        },
        21 => r.i16()?.to_string(),
        23 => r.i32()?.to_string(),
        20 => r.i64()?.to_string(),
        700 => {
            let bits = r.u32()?;
            format!("{} (0x{bits:08x})", f32::from_bits(bits))
        }
        701 => {
            let bits = r.take().map(u64::from_be_bytes)?;
            format!("{} (0x{bits:016x})", f64::from_bits(bits))
        }
        25 | 1043 => format!("{:?}", std::str::from_utf8(r.bytes(b.len())?).ok()?),
        17 => format!("\\x{}", hex(r.bytes(b.len())?)),
        2950 => {
            let h = hex(r.bytes(16)?);
            format!(
                "{}-{}-{}-{}-{}",
                &h[..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        }
        1700 => numeric(&mut r)?,
        1186 => {
            let (micros, days, months) = (r.i64()?, r.i32()?, r.i32()?);
            format!("{months} months {days} days {micros} µs")
        }
        1082 => date(r.i32()?.into()),
        1083 => {
            let us = r.i64()?;
            format!("{} ({us} µs)", time_of_day(us))
        }
        1114 | 1184 => {
            let us = r.i64()?;
            let text = match us {
                i64::MAX => "infinity".to_owned(),
                i64::MIN => "-infinity".to_owned(),
                _ => format!(
                    "{} {}",
                    date(us.div_euclid(86_400_000_000)),
                    time_of_day(us.rem_euclid(86_400_000_000))
                ),
            };
            format!("{text} ({us} µs)")
        }
        1000 | 1005 | 1007 | 1016 | 1021 | 1022 | 1009 | 1015 => array(&mut r)?,
        _ => format!("oid {oid}: {}", hex(r.bytes(b.len())?)),
    };
    r.end(s)
}

/// NUMERIC: ndigits, weight, sign, dscale, then base-10,000 digits. The
/// text is the decimal PostgreSQL prints (with `dscale` fraction digits);
/// the header fields and the digits follow it, so that two values compare
/// equal only when their bytes do.
fn numeric(r: &mut Reader) -> Option<String> {
    let (ndigits, weight, sign, dscale) = (r.i16()?, r.i16()?, r.u16()?, r.u16()?);
    let digits: Vec<i16> = (0..ndigits).map(|_| r.i16()).collect::<Option<_>>()?;
    let header = format!("[ndigits {ndigits} weight {weight} sign 0x{sign:04x} dscale {dscale}]");
    let text = match sign {
        0xc000 => "NaN".to_owned(),
        0xd000 => "Infinity".to_owned(),
        0xf000 => "-Infinity".to_owned(),
        0x0000 | 0x4000 => {
            // The digit whose place value is 10000^e.
            let at = |e: i32| -> i16 {
                let i = i32::from(weight) - e;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| digits.get(i).copied())
                    .unwrap_or(0)
            };
            let mut t = String::new();
            if sign == 0x4000 {
                t.push('-');
            }
            if weight < 0 {
                t.push('0');
            } else {
                let _ = write!(t, "{}", at(weight.into()));
                for e in (0..i32::from(weight)).rev() {
                    let _ = write!(t, "{:04}", at(e));
                }
            }
            if dscale > 0 {
                t.push('.');
                let mut frac = String::new();
                for e in 1..=i32::from(dscale.div_ceil(4)) {
                    let _ = write!(frac, "{:04}", at(-e));
                }
                t.push_str(&frac[..usize::from(dscale)]);
            }
            t
        }
        _ => format!("sign 0x{sign:04x}?"),
    };
    Some(format!("{text} {header} {digits:?}"))
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days since 2000-01-01 as a date.
fn date(days: i64) -> String {
    match days {
        d if d == i64::from(i32::MAX) => return "infinity".into(),
        d if d == i64::from(i32::MIN) => return "-infinity".into(),
        _ => {}
    }
    let year_len = |y: i64| if leap(y) { 366 } else { 365 };
    let (mut y, mut d) = (2000i64, days);
    while d < 0 {
        y -= 1;
        d += year_len(y);
    }
    while d >= year_len(y) {
        d -= year_len(y);
        y += 1;
    }
    let months = [
        31,
        if leap(y) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut m = 0;
    while d >= months[m] {
        d -= months[m];
        m += 1;
    }
    format!("{y:04}-{:02}-{:02} ({days} d)", m + 1, d + 1)
}

/// Microseconds since midnight as HH:MM:SS.ffffff.
fn time_of_day(us: i64) -> String {
    let s = us / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        us % 1_000_000
    )
}

/// An array: ndim, has-null flag, element OID, (length, lower bound) per
/// dimension, then each element as a length (-1: NULL) and its bytes.
fn array(r: &mut Reader) -> Option<String> {
    let (ndim, flags, elem) = (r.i32()?, r.i32()?, r.u32()?);
    let mut dims = Vec::new();
    let mut count = 1i64;
    for _ in 0..ndim {
        let (len, lower) = (r.i32()?, r.i32()?);
        dims.push(format!("{len}@{lower}"));
        count *= i64::from(len);
    }
    if ndim == 0 {
        count = 0;
    }
    let mut elems = Vec::new();
    for _ in 0..count {
        let len = r.i32()?;
        if len < 0 {
            elems.push("NULL".to_owned());
        } else {
            let b = r.bytes(usize::try_from(len).ok()?)?;
            elems.push(decode(elem, b)?);
        }
    }
    Some(format!(
        "ndim {ndim} has-null {flags} elem {elem} dims [{}] {{{}}}",
        dims.join(" "),
        elems.join(", ")
    ))
}

/// Column type OIDs and canonical rows of a query's binary-format result.
async fn binary(
    c: &Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<(Vec<u32>, Vec<Vec<String>>), String> {
    let stmt = c.prepare(sql).await.map_err(|e| format!("{e:?}"))?;
    let rows = c.query(&stmt, params).await.map_err(|e| format!("{e:?}"))?;
    let oids: Vec<u32> = stmt.columns().iter().map(|c| c.type_().oid()).collect();
    let mut out = Vec::new();
    for row in &rows {
        let mut vals = Vec::new();
        for (i, oid) in oids.iter().enumerate() {
            let raw: Raw = row.try_get(i).map_err(|e| format!("{e:?}"))?;
            vals.push(canonical(*oid, raw.0.as_deref()));
        }
        out.push(vals);
    }
    Ok((oids, out))
}

/// A query's text-format result (simple protocol).
async fn text(c: &Client, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
    let msgs = c.simple_query(sql).await.map_err(|e| format!("{e:?}"))?;
    Ok(msgs
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect())
}

/// The first rows that differ, for a failure message.
fn diff<T: std::fmt::Debug + PartialEq>(want: &[Vec<T>], got: &[Vec<T>]) -> String {
    let mut out = format!("{} rows vs {} rows", want.len(), got.len());
    let mut shown = 0;
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        for (j, (a, b)) in w.iter().zip(g).enumerate() {
            if a != b && shown < 6 {
                let _ = write!(
                    out,
                    "\n    row {i} col {j}:\n      postgres:  {a:?}\n      tablegate: {b:?}"
                );
                shown += 1;
            }
        }
        if w.len() != g.len() && shown < 6 {
            let _ = write!(out, "\n    row {i}: {} vs {} columns", w.len(), g.len());
            shown += 1;
        }
    }
    out
}

#[tokio::test]
async fn binary_results_match_postgresql() {
    let SideBySide { p, t, .. } = &SideBySide::start().await;
    load(p).await;
    load(t).await;
    assert!(QUERIES.len() >= 30);
    let mut failures = Vec::new();
    for sql in QUERIES {
        let (want_oids, want) = binary(p, sql, &[])
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL: {sql}: {e}"));
        assert!(!want.is_empty(), "no rows: {sql}");
        match binary(t, sql, &[]).await {
            Err(e) => failures.push(format!("{sql}\n  binary: tablegate error: {e}")),
            Ok((oids, _)) if oids != want_oids => failures.push(format!(
                "{sql}\n  binary: type OIDs: postgres {want_oids:?}, tablegate {oids:?}"
            )),
            Ok((_, got)) if got != want => {
                failures.push(format!("{sql}\n  binary: {}", diff(&want, &got)));
            }
            Ok(_) => {}
        }
        let want = text(p, sql)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL: {sql}: {e}"));
        match text(t, sql).await {
            Err(e) => failures.push(format!("{sql}\n  text: tablegate error: {e}")),
            Ok(got) if got != want => {
                failures.push(format!("{sql}\n  text: {}", diff(&want, &got)));
            }
            Ok(_) => {}
        }
    }

    // Parameters bound in binary: int4, float8, bool, timestamptz, int8,
    // timestamp and text, one of them NULL.
    let sql = "SELECT rk, n + $1 AS a, f * $2 AS b, ok = $3 AS c, ts > $4 AS d, big - $5 AS e, \
               lt < $6 AS g FROM vals WHERE pk = $7 ORDER BY rk";
    let when = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_234_567_890_123_456);
    let cases: [[&(dyn ToSql + Sync); 7]; 2] = [
        [
            &7i32,
            &-2.5f64,
            &true,
            &when,
            &-9_000_000_000i64,
            &when,
            &"p1",
        ],
        [
            &None::<i32>,
            &f64::INFINITY,
            &false,
            &std::time::UNIX_EPOCH,
            &4_000_000_000_000i64,
            &std::time::UNIX_EPOCH,
            &"p2",
        ],
    ];
    let want_types = p.prepare(sql).await.unwrap().params().to_vec();
    match t.prepare(sql).await {
        Err(e) => failures.push(format!("{sql}\n  parameters: tablegate error: {e:?}")),
        Ok(stmt) if stmt.params() != want_types => failures.push(format!(
            "{sql}\n  parameter types: postgres {want_types:?}, tablegate {:?}",
            stmt.params()
        )),
        Ok(_) => {
            for params in &cases {
                let want = binary(p, sql, params)
                    .await
                    .unwrap_or_else(|e| panic!("PostgreSQL: {sql}: {e}"));
                match binary(t, sql, params).await {
                    Err(e) => failures.push(format!("{sql}\n  parameters: tablegate error: {e}")),
                    Ok(got) if got != want => failures.push(format!(
                        "{sql}\n  parameters: {:?} vs {:?}\n  {}",
                        want.0,
                        got.0,
                        diff(&want.1, &got.1)
                    )),
                    Ok(_) => {}
                }
            }
        }
    }
    // bytea and uuid parameters bound in binary (raw bytes), written by an
    // INSERT on the native path and read back.
    let ins = "INSERT INTO vals (pk, rk, raw, id) VALUES ('px', $1, $2, $3)";
    let id = RawUuid(*b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff");
    let rows: [[&(dyn ToSql + Sync); 3]; 2] = [
        [&"r1", &vec![0u8, 1, 2, 255], &id],
        [&"r2", &None::<Vec<u8>>, &id],
    ];
    for params in &rows {
        p.execute(ins, params).await.unwrap();
        if let Err(e) = t.execute(ins, params).await {
            failures.push(format!("{ins}\n  binary bytea/uuid parameters: {e:?}"));
        }
    }
    let sql = "SELECT rk, raw, id FROM vals WHERE pk = 'px' ORDER BY rk";
    let want = binary(p, sql, &[]).await.unwrap();
    match binary(t, sql, &[]).await {
        Ok(got) if got == want => {}
        other => failures.push(format!("{sql}\n  {want:?}\n  vs {other:?}")),
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        QUERIES.len() + 2,
        failures.join("\n")
    );
}

/// A uuid bound in binary: its 16 bytes (tokio-postgres' own uuid support
/// is behind a feature this crate does not enable).
#[derive(Debug)]
struct RawUuid([u8; 16]);

impl ToSql for RawUuid {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }

    tokio_postgres::types::to_sql_checked!();
}
