-- No GROUP BY key: rule KeylessCombine, one merge partition; HOP ships slices.
CREATE SOURCE bid (auction TEXT, price BIGINT, date_time TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
  WITH (topic = 'bid', partitions = 4, partition_key = 'auction');
EXPLAIN CREATE STREAM per10 AS
  SELECT HOP_START(date_time, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS ws, MAX(price) AS m, COUNT(*) AS n
  FROM bid GROUP BY HOP(date_time, INTERVAL '5' SECOND, INTERVAL '10' SECOND);
