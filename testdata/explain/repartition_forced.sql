-- strategy = 'repartition' overrides the local rule.
CREATE SOURCE tx (tenant TEXT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
  WITH (topic = 'tx', partitions = 4, partition_key = 'tenant');
EXPLAIN CREATE STREAM per_tenant WITH (strategy = 'repartition') AS
  SELECT tenant, COUNT(*) AS n FROM tx GROUP BY tenant;
