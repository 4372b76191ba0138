"""SQLAlchemy 2 (over psycopg 3) against a server: connect (SQLAlchemy
parses server_version and calls version(), current_schema(),
standard_conforming_strings), Core DDL, inserts and parameterized selects,
the ORM (mapped classes with text, integer and uuid primary keys; tablegate keeps
varchar as text, so the model says Text, add/get/query/update/
delete in sessions), reflection (table names, columns with types, Table(autoload_with=),
MetaData.reflect()) and a few functions drivers call. Prints one line per result; the
test runs it against tablegate and PostgreSQL 15 and compares the lines.
Usage: sqlalchemy_client.py URL tablegate|postgresql"""

import sys
import uuid

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    Table,
    Text,
    Uuid,
    create_engine,
    func,
    inspect,
    select,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

engine = create_engine(sys.argv[1])
SERVER = sys.argv[2]  # "tablegate" or "postgresql"


def out(label, value):
    print(f"{label}: {value!r}")


with engine.connect() as c:
    out("server major version", c.dialect.server_version_info[0])
    out("default_schema_name", c.dialect.default_schema_name)
    # The startup ParameterStatus agrees with version() and SHOW.
    info = c.connection.driver_connection.info
    out("server_version parameter", info.parameter_status("server_version").split(".")[0])
    out("server_version_num", int(c.execute(text("SHOW server_version_num")).scalar()) // 10000)
    user = engine.url.username
    out("current_user is the login", c.execute(text("SELECT current_user, session_user")).one() == (user, user))
    out("version() starts", c.execute(text("SELECT version()")).scalar().split(".")[0])
    out("current_setting", c.execute(text("SELECT current_setting('standard_conforming_strings')")).scalar())
    out("pg_typeof", c.execute(text("SELECT pg_typeof('x'::text)")).scalar())
    out("pg_size_pretty", c.execute(text("SELECT pg_size_pretty(123456789::bigint)")).scalar())
    c.execute(text("DROP TABLE IF EXISTS sa_orders"))
    c.execute(text("DROP TABLE IF EXISTS sa_customers"))
    c.commit()

metadata = MetaData()
orders = Table(
    "sa_orders",
    metadata,
    Column("customer", Text, primary_key=True),
    Column("order_id", Text, primary_key=True),
    Column("amount", Integer),
    Column("note", Text),
)
metadata.create_all(engine)

# A transaction is one entity-group transaction on tablegate: one
# PartitionKey (the first key column) per transaction.
for customer in range(3):
    with engine.begin() as c:
        c.execute(
            orders.insert(),
            [
                {"customer": f"c{i % 3}", "order_id": f"o{i:03}", "amount": i * 10, "note": None if i % 4 else "gift"}
                for i in range(12)
                if i % 3 == customer
            ],
        )
with engine.connect() as c:
    rows = c.execute(select(orders.c.order_id, orders.c.amount).where(orders.c.customer == "c1").order_by(orders.c.order_id)).all()
    out("core partition", rows)
    rows = c.execute(
        select(orders.c.customer, func.count(), func.sum(orders.c.amount)).group_by(orders.c.customer).order_by(orders.c.customer)
    ).all()
    out("core group by", rows)
    out("core point", c.execute(select(orders.c.note).where(orders.c.customer == "c0", orders.c.order_id == "o000")).all())
    out("core is null", c.execute(select(func.count()).select_from(orders).where(orders.c.note.is_(None))).scalar())


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "sa_customers"
    id: Mapped[str] = mapped_column(Text, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    city: Mapped[str | None] = mapped_column(Text)


Base.metadata.create_all(engine)
with Session(engine) as s:
    # Each customer is its own PartitionKey: one commit each.
    for c in [Customer(id="c0", name="Ana", city="Porto"), Customer(id="c1", name="Bob", city=None), Customer(id="c2", name="Cai", city="Oslo")]:
        s.add(c)
        s.commit()
with Session(engine) as s:
    out("orm get", (lambda c: (c.id, c.name, c.city))(s.get(Customer, "c1")))
    out("orm query", [(c.id, c.name) for c in s.scalars(select(Customer).where(Customer.city.is_not(None)).order_by(Customer.id))])
    c = s.get(Customer, "c2")
    c.city = "Lyon"
    s.commit()
    s.delete(s.get(Customer, "c0"))
    s.commit()
with Session(engine) as s:
    out("orm after", [(c.id, c.city) for c in s.scalars(select(Customer).order_by(Customer.id))])
    # Two partitions in one commit: tablegate refuses (0A000, one
    # entity-group transaction per commit), PostgreSQL commits.
    s.get(Customer, "c1").city = "Pune"
    s.get(Customer, "c2").city = "Oslo"
    try:
        s.commit()
        committed = True
    except Exception as e:
        s.rollback()
        committed = False
        assert e.orig.sqlstate == "0A000", e
    out("two partitions as expected", committed == (SERVER == "postgresql"))
    # A correlated scalar subquery in the select list (issue: it was NULL).
    o = orders.alias("o")
    spent = select(func.coalesce(func.sum(o.c.amount), 0)).where(o.c.customer == Customer.id).scalar_subquery()
    out("orm correlated", s.execute(select(Customer.id, spent.label("spent")).order_by(Customer.id)).all())

# Typed primary keys: an Integer key (not autoincrement: no sequences yet)
# and a UUID key, through the ORM; ranges on the typed key.
class Ticket(Base):
    __tablename__ = "sa_tickets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # create_all issues CREATE INDEX ix_sa_tickets_title; get_indexes and
    # autoload find it again.
    title: Mapped[str] = mapped_column(Text, index=True)


class Device(Base):
    __tablename__ = "sa_devices"
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(Text)


# The ORM's usual model: an autoincrement Integer key (SERIAL), ids
# assigned by the server and read back with RETURNING.
class Note(Base):
    __tablename__ = "sa_notes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    body: Mapped[str] = mapped_column(Text)


with engine.connect() as c:
    c.execute(text("DROP TABLE IF EXISTS sa_tickets"))
    c.execute(text("DROP TABLE IF EXISTS sa_devices"))
    c.execute(text("DROP TABLE IF EXISTS sa_notes"))
    c.commit()
Base.metadata.create_all(engine)
device_ids = [uuid.UUID(int=(i * 0x9E3779B97F4A7C15) % (1 << 128)) for i in range(1, 5)]
with Session(engine) as s:
    for i in [-3, 7, 10, 2, 100]:
        s.add(Ticket(id=i, title=f"t{i}"))
        s.commit()
    for n, d in enumerate(device_ids):
        s.add(Device(id=d, name=f"d{n}"))
        s.commit()
with Session(engine) as s:
    notes = [Note(body=b) for b in ["first", "second", "third"]]
    for n in notes:
        s.add(n)
        s.commit()
    out("orm serial ids", [n.id for n in notes])
    out("orm serial get", s.get(Note, 2).body)
with Session(engine) as s:
    out("orm int get", s.get(Ticket, 7).title)
    out("orm int range", [t.id for t in s.scalars(select(Ticket).where(Ticket.id >= 2, Ticket.id < 100).order_by(Ticket.id))])
    out("orm int order", [t.id for t in s.scalars(select(Ticket).order_by(Ticket.id.desc()))])
    s.get(Ticket, -3).title = "neg"
    s.commit()
    out("orm int update", s.get(Ticket, -3).title)
    out("orm uuid get", s.get(Device, device_ids[2]).name)
    out("orm uuid order", [d.name for d in s.scalars(select(Device).order_by(Device.id))])
    out("orm uuid type", type(s.scalars(select(Device.id)).first()).__name__)

insp = inspect(engine)
out("tables", sorted(t for t in insp.get_table_names() if t.startswith("sa_")))
for t in ["sa_orders", "sa_customers", "sa_tickets", "sa_devices", "sa_notes"]:
    # Every tablegate table also has the store's Timestamp column (SELECT *
    # shows it too).
    cols = [(col["name"], str(col["type"]), col["nullable"]) for col in insp.get_columns(t)]
    out(f"{t} columns", [col for col in cols if col[0] != "timestamp"])
    pk = insp.get_pk_constraint(t)
    out(f"{t} primary key", (pk["name"], pk["constrained_columns"]))
out("has_table", (insp.has_table("sa_orders"), insp.has_table("sa_nope")))
# Table(autoload_with=) and MetaData.reflect() read every kind of
# constraint, index and comment (pg_index's int2vector indkey is unnested).
for t in ["sa_orders", "sa_tickets", "sa_devices"]:
    out(f"{t} indexes", insp.get_indexes(t))
    out(f"{t} foreign keys", insp.get_foreign_keys(t))
    out(f"{t} unique", insp.get_unique_constraints(t))
    out(f"{t} checks", insp.get_check_constraints(t))
    out(f"{t} comment", insp.get_table_comment(t))
    loaded = Table(t, MetaData(), autoload_with=engine)
    out(
        f"{t} autoload",
        (
            [(c.name, str(c.type)) for c in loaded.columns if c.name != "timestamp"],
            [c.name for c in loaded.primary_key.columns],
            sorted(i.name for i in loaded.indexes),
        ),
    )
reflected = MetaData()
reflected.reflect(engine, only=["sa_orders", "sa_customers", "sa_notes"])
out("reflect", sorted((t.name, [c.name for c in t.primary_key.columns]) for t in reflected.sorted_tables))
with Session(engine) as s:
    orders = reflected.tables["sa_orders"]
    out("reflected select", s.execute(select(func.count()).select_from(orders)).scalar())
print("sqlalchemy ok")
