// Placement agreement between Kafka's Java client and TurbineSQL, run by
// ci/kafka/placement_test.go (see ci/kafka/run.sh) as a single-file source
// program: java -cp 'target/lib/*' Placement.java <command> ...
//
//   produce <bootstrap> <count> <topic>=<compression> ...
//       Writes <count> keyed records to each topic, compressed with the
//       given codec (none, gzip, snappy, lz4, zstd), with the Java producer's default
//       partitioner (no partitioner.class set: keyed records go to
//       murmur2(key) mod partitions) and prints nothing else. Keys are
//       Placement.key(i); the value is {"k": key, "i": i} as JSON.
//   groups <bootstrap> <count> <n>
//       Prints "i<TAB>partition" for the first <count> keys: the partition
//       the Java producer would pick among <n> (<bootstrap> is unused).
//   verify <bootstrap> <count> <topic> ...
//       Reads each whole topic and checks that every record is keyed and sits on the
//       partition the Java client would choose for its key
//       (BuiltInPartitioner.partitionForKey, the producer's own code) and
//       that exactly <count> records were read from each topic. Exits 1 on
//       any mismatch.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Placement {
    // The same keys as keyFor in placement_test.go: ASCII ids, decimal
    // integers (how TurbineSQL spells a BIGINT key), multi-byte UTF-8 and the
    // empty string.
    static String key(int i) {
        switch (i % 5) {
            case 0: return "user-" + i;
            case 1: return Long.toString((long) i * 7919L - 50000L);
            case 2: return "tenant-" + (i % 97) + "/ünïcødé-" + i + "-日本";
            case 3: return i % 15 == 3 ? "" : "k" + i;
            default: return "x".repeat(1 + i % 40) + i;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: Placement produce <bootstrap> <count> <topic>=<compression>... | groups <bootstrap> <count> <n> | verify <bootstrap> <count> <topic>...");
            System.exit(2);
        }
        String cmd = args[0], bootstrap = args[1];
        if (cmd.equals("produce")) {
            int count = Integer.parseInt(args[2]);
            for (int a = 3; a < args.length; a++) {
                String[] tc = args[a].split("=", 2);
                produce(bootstrap, tc[0], count, tc.length > 1 ? tc[1] : "none");
            }
        } else if (cmd.equals("groups")) {
            keyGroups(Integer.parseInt(args[2]), Integer.parseInt(args[3]));
        } else if (cmd.equals("verify")) {
            int failed = 0;
            for (int a = 3; a < args.length; a++) {
                failed += verify(bootstrap, args[a], Integer.parseInt(args[2]));
            }
            System.exit(failed == 0 ? 0 : 1);
        } else {
            System.err.println("unknown command " + cmd);
            System.exit(2);
        }
    }

    // Prints, for Placement.key(0..count-1), one line "i<TAB>partition" with
    // the partition the Java producer picks among n: with n = 960 that is
    // the key group. No broker involved (a 960-partition topic on the
    // one-node test broker is slow to create and to warm up).
    static void keyGroups(int count, int n) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < count; i++) {
            byte[] k = key(i).getBytes(StandardCharsets.UTF_8);
            b.append(i).append('\t').append(BuiltInPartitioner.partitionForKey(k, n)).append('\n');
        }
        System.out.print(b);
    }

    static void produce(String bootstrap, String topic, int count, String compression) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("compression.type", compression);
        p.put("acks", "all");
        p.put("linger.ms", "5");
        AtomicReference<Exception> failed = new AtomicReference<>();
        try (KafkaProducer<String, String> prod = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                String k = key(i);
                String v = "{\"k\":" + jsonString(k) + ",\"i\":" + i + "}";
                prod.send(new ProducerRecord<>(topic, k, v), (md, e) -> {
                    if (e != null) {
                        failed.compareAndSet(null, e);
                    }
                });
            }
            prod.flush();
        }
        if (failed.get() != null) {
            throw new RuntimeException("producing to " + topic + " failed", failed.get());
        }
    }

    static int verify(String bootstrap, String topic, int count) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", "read_committed");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p)) {
            List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(30));
            if (infos == null || infos.isEmpty()) {
                System.err.println("topic " + topic + " not found");
                return 1;
            }
            int n = infos.size();
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : infos) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<TopicPartition, Long> remaining = new HashMap<>();
            for (TopicPartition tp : tps) {
                if (end.get(tp) > c.position(tp, Duration.ofSeconds(30))) {
                    remaining.put(tp, end.get(tp));
                }
            }
            long deadline = System.currentTimeMillis() + 60_000;
            int read = 0, bad = 0, unkeyed = 0;
            while (!remaining.isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("timed out reading " + topic + "; partitions left: " + remaining.keySet());
                    return 1;
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    read++;
                    if (r.key() == null) {
                        unkeyed++;
                    } else {
                        int want = BuiltInPartitioner.partitionForKey(r.key(), n);
                        if (want != r.partition()) {
                            bad++;
                            if (bad <= 10) {
                                System.err.printf("MISPLACED %s/%d offset %d key %s: the Java client places it on partition %d%n",
                                        topic, r.partition(), r.offset(), new String(r.key(), StandardCharsets.UTF_8), want);
                            }
                        }
                    }
                }
                for (TopicPartition tp : new ArrayList<>(remaining.keySet())) {
                    if (c.position(tp) >= remaining.get(tp)) {
                        remaining.remove(tp);
                    }
                }
            }
            System.out.printf("%s: %d records on %d partitions, %d unkeyed, %d misplaced%n", topic, read, n, unkeyed, bad);
            if (read != count) {
                System.err.printf("expected %d records in %s, read %d%n", count, topic, read);
                return 1;
            }
            return bad == 0 && unkeyed == 0 ? 0 : 1;
        }
    }

    static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\');
            }
            b.append(ch);
        }
        return b.append('"').toString();
    }
}
