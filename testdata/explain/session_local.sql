-- A session window on the partition key stays local.
CREATE SOURCE clicks (user_id TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
  WITH (topic = 'clicks', partitions = 2, partition_key = 'user_id');
EXPLAIN CREATE STREAM visits AS
  SELECT user_id, SESSION_START(ts, INTERVAL '30' SECOND) AS s, COUNT(*) AS n
  FROM clicks GROUP BY user_id, SESSION(ts, INTERVAL '30' SECOND);
