-- Rule CostModel: many rows per key and window; combine ships fewer bytes.
CREATE SOURCE tx (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 2, partition_key = 'tenant');
INSERT INTO tx VALUES ('t1', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t1', 'u1', 2, TIMESTAMP '2026-01-01 00:00:02'),
  ('t1', 'u1', 3, TIMESTAMP '2026-01-01 00:00:03'), ('t1', 'u2', 4, TIMESTAMP '2026-01-01 00:00:04'),
  ('t1', 'u2', 5, TIMESTAMP '2026-01-01 00:00:05'), ('t1', 'u2', 6, TIMESTAMP '2026-01-01 00:00:06'),
  ('t1', 'u1', 7, TIMESTAMP '2026-01-01 00:00:07'), ('t1', 'u1', 8, TIMESTAMP '2026-01-01 00:00:08');
EXPLAIN CREATE STREAM per_user AS
  SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(amount) AS total
  FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE);
