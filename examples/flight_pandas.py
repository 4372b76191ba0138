"""pandas and pyarrow over Arrow Flight SQL: the demo's registrations as a
DataFrame and as an Arrow table, with no row format in between.

    cargo run -- demo --flight-listen 127.0.0.1:50051
    pip install adbc-driver-flightsql pyarrow pandas
    python3 examples/flight_pandas.py 50051
"""

import sys

import adbc_driver_flightsql.dbapi as flight
import pandas as pd

port = sys.argv[1] if len(sys.argv) > 1 else "50051"
# A user name makes ADBC authenticate: the connection keeps one session
# (its SETs, its transactions). Under --auth scram, give a real password.
conn = flight.connect(f"grpc://127.0.0.1:{port}",
                      db_kwargs={"username": "tablegate", "password": ""}, autocommit=True)

# An aggregate: the analytics engine runs it, pandas gets its Arrow batches.
ages = pd.read_sql(
    "SELECT race, count(*) AS runners, avg(age) AS mean_age FROM registrations "
    "WHERE runner LIKE 'BIB:%' GROUP BY race ORDER BY race", conn)
print(ages.to_string(index=False))

# A row range with parameters ($1, as in PostgreSQL), as a pyarrow Table
# (polars: polars.from_arrow(table)).
with conn.cursor() as cur:
    cur.execute("SELECT runner, name, age FROM registrations WHERE race = $1 AND runner LIKE $2",
                ("2026 New York City Marathon__Full", "AGE:03%"))
    table = cur.fetch_arrow_table()
print(f"{table.num_rows} runners aged 30-39, columns {table.schema.names}")
conn.close()
