-- Rule LocalPartitionKey: GROUP BY contains the source's partition key.
CREATE SOURCE tx (tenant TEXT, user_id TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 4, partition_key = 'tenant');
EXPLAIN CREATE STREAM per_tenant AS
  SELECT tenant, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(amount) AS total
  FROM tx WHERE amount > 0 GROUP BY tenant, TUMBLE(ts, INTERVAL '1' MINUTE) HAVING COUNT(*) > 1;
