-- Rule CostModel with an empty source: combine, which never ships more records.
CREATE SOURCE tx (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 4, partition_key = 'tenant');
EXPLAIN CREATE STREAM per_user AS
  SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM tx GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE);
