-- Rule MisplacedInput: the GROUP BY contains the source's partition key,
-- but a stream's placement check saw its records where murmur2 on that key
-- would not put them (here another source over the topic keys it by
-- tenant), so under strategy auto the records are re-keyed through a
-- repartition hop instead of being aggregated where they are.
CREATE SOURCE by_tenant (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
  WITH (topic = 'pay', partitions = 4, partition_key = 'tenant');
CREATE SOURCE pay (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
  WITH (topic = 'pay', partition_key = 'user_id');
CREATE STREAM per_user AS
  SELECT user_id, COUNT(*) AS n FROM pay GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE);
INSERT INTO by_tenant VALUES ('acme', 'u3', 30, TIMESTAMP '2026-01-01 00:00:03'), ('globex', 'u4', 40, TIMESTAMP '2026-01-01 00:00:04');
FLUSH;
EXPLAIN CREATE STREAM per_user_total AS
  SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, SUM(amount) AS total
  FROM pay GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE);
