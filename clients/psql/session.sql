-- The psql session of `make test-clients` (clients/run.sh): its whole
-- output must equal expected.out. psql 15 has no \bind, so the
-- parameterised query is PREPARE/EXECUTE; \gdesc shows the column types
-- the server describes; \d, \dt, \d+ read pg_catalog.
\set ON_ERROR_STOP 0
\set VERBOSITY terse
CREATE SOURCE readings (sensor TEXT, seq BIGINT, value DOUBLE, ok BOOLEAN, ts TIMESTAMP,
  WATERMARK FOR ts AS ts) WITH (topic = 'readings', partitions = 2, partition_key = 'sensor');
INSERT INTO readings VALUES ('s1', 1, 1.5, true, TIMESTAMP '2024-01-01 00:00:00'),
  ('s2', 2, -2.25, false, TIMESTAMP '2024-01-01 00:00:30.5'), ('s1', 3, NULL, NULL, TIMESTAMP '2024-01-01 00:00:59');
CREATE STREAM per_sensor WITH (topic = 'per_sensor') AS
  SELECT sensor, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS w, COUNT(*) AS n, SUM(value) AS total
  FROM readings GROUP BY sensor, TUMBLE(ts, INTERVAL '1' MINUTE);
INSERT INTO readings VALUES ('s1', 4, 0.5, true, TIMESTAMP '2024-01-01 00:02:00'),
  ('s2', 5, 0.5, true, TIMESTAMP '2024-01-01 00:02:00');
FLUSH;

SELECT sensor, seq, value, ok, ts FROM readings ORDER BY seq;
SELECT sensor, seq, value, ok, ts FROM readings \gdesc
SELECT sensor, w, n, total FROM per_sensor ORDER BY sensor;

PREPARE by_sensor(bigint, text) AS
  SELECT sensor, seq, value, ok, ts FROM readings WHERE seq >= $1 AND sensor = $2 ORDER BY seq;
EXECUTE by_sensor(2, 's2');
PREPARE typed AS SELECT seq FROM readings WHERE ts > $1 AND ok = $2 AND value < $3 ORDER BY seq;
EXECUTE typed(TIMESTAMP '2024-01-01 00:00:10', true, 1.0);
DEALLOCATE by_sensor;

-- An error, told by its SQLSTATE; the session carries on.
SELECT * FROM missing;
\echo SQLSTATE :LAST_ERROR_SQLSTATE

BEGIN;
SHOW server_version;
SHOW transaction isolation level;
COMMIT;
SET application_name = 'psql-session';
SELECT 1 AS one;

\d
\dt
\d readings
\d per_sensor
\d+ per_sensor
\d nothing

-- An upsert stream reads as its current table; \d shows its primary key.
CREATE STREAM sensor_totals WITH (topic = 'sensor_totals') AS
  SELECT sensor, COUNT(*) AS n FROM readings GROUP BY sensor;
FLUSH;
INSERT INTO readings VALUES ('s1', 6, 1.0, true, TIMESTAMP '2024-01-01 00:03:00');
FLUSH;
SELECT sensor, n FROM sensor_totals ORDER BY sensor;
SELECT n FROM sensor_totals WHERE sensor = 's1';
\d sensor_totals
DESCRIBE sensor_totals;

-- Catalog queries run through the engine's planner and evaluator.
SELECT relname FROM pg_catalog.pg_class WHERE relname = ANY(ARRAY['readings']);
SELECT relname FROM pg_catalog.pg_class WHERE relnamespace = 2200 ORDER BY relname LIMIT 2;
SELECT count(*) FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public';
SELECT * FROM pg_catalog.pg_nonexistent;
\echo SQLSTATE :LAST_ERROR_SQLSTATE
