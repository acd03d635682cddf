"""The psycopg 3 session of `make test-clients` (clients/run.sh).

DDL, INSERT with server-side parameters and FLUSH, then typed SELECTs and a
parameterised query run three ways: psycopg's default (server-side binding,
text), prepared (prepare=True: a named server-side statement) and binary
(binary=True: binary parameters and results). Then SQLAlchemy's reflection
(inspect(engine): table and view names, columns, primary keys), the path BI
tools built on it take. Exits non-zero at the first difference.

    python session.py "host=127.0.0.1 port=5433 user=turbine dbname=turbine"
"""

import sys
from datetime import datetime

import psycopg
import sqlalchemy
from psycopg.types import TypeInfo

ROWS = [
    ("s1", 1, 1.5, True, datetime(2024, 1, 1, 0, 0, 0)),
    ("s2", 2, -2.25, False, datetime(2024, 1, 1, 0, 0, 30, 500000)),
    ("s1", 3, None, None, datetime(2024, 1, 1, 0, 0, 59)),
    ("s1", 4, 0.5, True, datetime(2024, 1, 1, 0, 2, 0)),
    ("s2", 5, 0.5, True, datetime(2024, 1, 1, 0, 2, 0)),
]

# text, int8, float8, bool, timestamp
TYPES = [25, 20, 701, 16, 1114]

PARAMETERISED = (
    "SELECT sensor, seq, value, ok, ts FROM readings"
    " WHERE seq >= %s AND sensor = %s AND ts > %s AND value < %s AND ok = %s ORDER BY seq"
)
ARGS = (2, "s2", datetime(2024, 1, 1, 0, 0, 10), 1.0, True)


def check(what, got, want):
    if got != want:
        raise AssertionError(f"{what}:\n got {got!r}\nwant {want!r}")


def setup(conninfo):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        check("server_version", conn.info.server_version // 10000, 16)
        conn.execute(
            "CREATE SOURCE readings (sensor TEXT, seq BIGINT, value DOUBLE, ok BOOLEAN, ts TIMESTAMP,"
            " WATERMARK FOR ts AS ts) WITH (topic = 'readings', partitions = 2, partition_key = 'sensor')"
        )
        conn.execute(
            "INSERT INTO readings VALUES ('s1', 1, 1.5, true, TIMESTAMP '2024-01-01 00:00:00'),"
            " ('s2', 2, -2.25, false, TIMESTAMP '2024-01-01 00:00:30.5'),"
            " ('s1', 3, NULL, NULL, TIMESTAMP '2024-01-01 00:00:59')"
        )
        conn.execute(
            "CREATE STREAM per_sensor WITH (topic = 'per_sensor') AS"
            " SELECT sensor, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w, COUNT(*) AS n, SUM(value) AS total"
            " FROM readings GROUP BY sensor, TUMBLE(ts, INTERVAL '1' MINUTE)"
        )
        # An upsert stream: its group key is its primary key.
        conn.execute(
            "CREATE STREAM sensor_counts WITH (topic = 'sensor_counts') AS"
            " SELECT sensor, COUNT(*) AS n FROM readings GROUP BY sensor"
        )
        # Server-side parameters of every type, through INSERT.
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO readings VALUES (%s, %s, %s, %s, %s)", ROWS[3:])
        conn.execute("FLUSH")


def session(conninfo, name, **opts):
    # The default: not autocommit, so psycopg wraps statements in BEGIN ...
    # COMMIT, which the server accepts.
    with psycopg.connect(conninfo) as conn:
        with conn.cursor(binary=opts.get("binary", False)) as cur:
            cur.execute("SELECT sensor, seq, value, ok, ts FROM readings ORDER BY seq", **opts)
            check(f"{name}: column types", [d.type_code for d in cur.description], TYPES)
            check(f"{name}: typed SELECT", cur.fetchall(), ROWS)

            for run in range(3):
                cur.execute(PARAMETERISED, ARGS, **opts)
                check(f"{name}: parameterised SELECT, run {run + 1}", cur.fetchall(), ROWS[4:])

            cur.execute("SELECT sensor, w, n, total FROM per_sensor ORDER BY sensor", **opts)
            check(
                f"{name}: stream SELECT",
                cur.fetchall(),
                [("s1", datetime(2024, 1, 1), 2, 1.5), ("s2", datetime(2024, 1, 1), 1, -2.25)],
            )
        conn.commit()

        # An error, told by its SQLSTATE; after ROLLBACK the connection is
        # usable again.
        try:
            conn.execute("SELECT * FROM missing", **opts)
            raise AssertionError(f"{name}: SELECT from a missing relation succeeded")
        except psycopg.Error as e:
            check(f"{name}: SQLSTATE", e.sqlstate, "42P01")
            check(f"{name}: error class", type(e).__name__, "UndefinedTable")
        conn.rollback()

        version = conn.execute("SHOW server_version").fetchone()[0]
        check(f"{name}: SHOW server_version", version.split(".")[0], "16")
        conn.commit()
    print(f"python: {name} ok")


def reflection(conninfo):
    """SQLAlchemy's Inspector reads pg_catalog through the planner."""
    # The same connection string (SCRAM, TLS verify-full) through psycopg.
    engine = sqlalchemy.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo))
    try:
        insp = sqlalchemy.inspect(engine)
        check("get_schema_names", "public" in insp.get_schema_names(), True)
        check("get_table_names", insp.get_table_names(), ["readings"])
        check("get_materialized_view_names", sorted(insp.get_materialized_view_names()), ["per_sensor", "sensor_counts"])
        cols = [(c["name"], str(c["type"]), c["nullable"]) for c in insp.get_columns("readings")]
        check(
            "get_columns readings",
            cols,
            [("sensor", "TEXT", True), ("seq", "BIGINT", True), ("value", "DOUBLE PRECISION", True),
             ("ok", "BOOLEAN", True), ("ts", "TIMESTAMP", False)],
        )
        cols = [(c["name"], str(c["type"])) for c in insp.get_columns("sensor_counts")]
        check("get_columns sensor_counts", cols, [("sensor", "TEXT"), ("n", "BIGINT")])
        pk = insp.get_pk_constraint("sensor_counts")
        check("get_pk_constraint", (pk["name"], pk["constrained_columns"]), ("sensor_counts_pkey", ["sensor"]))
        check("no primary key on a source", insp.get_pk_constraint("readings")["constrained_columns"], [])
        check("has_table", (insp.has_table("readings"), insp.has_table("nothing")), (True, False))
        meta = sqlalchemy.MetaData()
        t = sqlalchemy.Table("readings", meta, autoload_with=engine)
        with engine.connect() as conn:
            rows = conn.execute(sqlalchemy.select(t.c.sensor, t.c.seq).where(t.c.seq > 3).order_by(t.c.seq)).all()
        check("reflected table SELECT", [tuple(r) for r in rows], [("s1", 4), ("s2", 5)])
    finally:
        engine.dispose()
    print("python: SQLAlchemy reflection ok")


def main():
    conninfo = sys.argv[1]
    setup(conninfo)
    session(conninfo, "server-side binding")
    session(conninfo, "prepare=True", prepare=True)
    session(conninfo, "binary=True", binary=True)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        # psycopg asks pg_type about types it is told to fetch.
        info = TypeInfo.fetch(conn, "int8")
        check("TypeInfo.fetch int8", (info.name, info.oid), ("int8", 20))
    reflection(conninfo)
    print("python: ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # report and fail, whatever went wrong
        print(f"python: FAIL: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
