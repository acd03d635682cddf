-- Rule CostModel: every row its own key, and many aggregates whose partials
-- outweigh the row: repartition moves fewer bytes.
CREATE SOURCE tx (tenant TEXT, user_id TEXT, x BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 2, partition_key = 'tenant');
INSERT INTO tx VALUES ('t1', 'u1', 1, TIMESTAMP '2026-01-01 00:00:01'), ('t1', 'u2', 2, TIMESTAMP '2026-01-01 00:00:02'),
  ('t1', 'u3', 3, TIMESTAMP '2026-01-01 00:00:03'), ('t1', 'u4', 4, TIMESTAMP '2026-01-01 00:00:04');
EXPLAIN CREATE STREAM per_user AS
  SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, MIN(x) AS lo, MAX(x) AS hi,
    VAR_SAMP(x) AS v, STDDEV_POP(x) AS sd, CORR(x, x) AS c, APPROX_MEDIAN(x) AS med, APPROX_COUNT_DISTINCT(x) AS d
  FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE);
