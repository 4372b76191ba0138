"""psycopg 3 client of tablegate: race registrations written with the seeds'
dual-row pattern (a BIB: row and an AGE: row per runner, in one transaction,
which tablegate runs as one entity-group transaction), retrying only what the
server says to retry (SQLSTATE 53000 and 40001) with the seeds' exponential
backoff. Client errors are never retried.

    cargo run -- demo            # in another terminal
    python3 examples/psycopg_race.py 5433 [host] [runners]
"""

import random
import sys
import time

import psycopg

RACE = "2026 Chicago Marathon__Full"
RETRYABLE = {"53000", "40001"}


def backoff(retry, z=0.100, zmin=0.020, zmax=2.0):
    """y = Rand(0.8z, 1.2z) * (2^x - 1); delay = min(zmin + y, zmax)."""
    y = random.uniform(0.8 * z, 1.2 * z) * (2**retry - 1)
    return min(zmin + y, zmax)


def register(conn, bib, stats):
    name, gender, age = ("Ana", "Bo", "Chen")[bib % 3], "FM"[bib % 2], 20 + bib % 50
    rows = [
        f"BIB:{bib:05}__{name}__{gender}__{age}",
        f"AGE:{age:03}__{bib:05}__{name}__{gender}",
    ]
    for attempt in range(1, 8):
        try:
            with conn.transaction():
                for runner in rows:
                    conn.execute(
                        "INSERT INTO race_regs (race, runner, bib, name, gender, age)"
                        " VALUES (%s, %s, %s, %s, %s, %s)",
                        (RACE, runner, bib, name, gender, age),
                    )
            return True
        except psycopg.errors.UniqueViolation:
            return False  # registered by an earlier run
        except psycopg.Error as e:
            # The transaction block has rolled back (a failed COMMIT ends
            # its transaction, as in PostgreSQL).
            if e.sqlstate not in RETRYABLE or attempt == 7:
                raise
            stats[e.sqlstate] += 1
            time.sleep(backoff(attempt))


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 5433
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    runners = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    with psycopg.connect(host=host, port=port, user="tablegate", dbname="tablegate", autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS race_regs (race TEXT, runner TEXT, bib INTEGER,"
            " name TEXT, gender TEXT, age INTEGER, PRIMARY KEY (race, runner))"
        )
        conn.execute("SET tablegate.retry_policy = none")  # back off here, not in the server
        stats = {"53000": 0, "40001": 0}
        registered = sum(register(conn, bib, stats) for bib in range(runners))
        conn.execute("RESET tablegate.retry_policy")  # reads: the server retries them
        total = conn.execute("SELECT count(*) FROM race_regs WHERE race = %s", (RACE,)).fetchone()[0]
        print(
            f"psycopg_race ok: registered={registered} rows={total}"
            f" retries_53000={stats['53000']} conflicts_40001={stats['40001']}"
        )


if __name__ == "__main__":
    main()
