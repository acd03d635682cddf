-- EMIT EVERY: the select list and the is_final column the aggregation adds.
CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
  WITH (topic = 'ev', partitions = 1, partition_key = 'k');
EXPLAIN CREATE STREAM counts AS
  SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)
  EMIT EVERY INTERVAL '300' MILLISECOND;
