-- Rule Stateless: no aggregation.
CREATE SOURCE tx (tenant TEXT, amount BIGINT) WITH (topic = 'tx', partitions = 2);
EXPLAIN CREATE STREAM big AS SELECT tenant, amount * 2 AS doubled FROM tx WHERE amount > 100;
