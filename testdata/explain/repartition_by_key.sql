-- Rule RepartitionByKey: GROUP BY lacks the partition key; re-key by user_id.
CREATE SOURCE tx (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 4, partition_key = 'tenant');
EXPLAIN CREATE STREAM per_user AS
  SELECT user_id, HOP_START(ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE) AS ws, AVG(amount) AS mean
  FROM tx GROUP BY user_id, HOP(ts, INTERVAL '10' SECOND, INTERVAL '1' MINUTE);
