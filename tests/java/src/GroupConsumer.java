// A consumer group member (classic protocol, or KIP-848 with group.protocol=consumer) that commits synchronously after processing each
// poll and when partitions are revoked, so a rebalance never re-delivers or skips a record.
// Usage: GroupConsumer BOOTSTRAP GROUP TOPIC STOP_FILE RATE_PER_SEC [key=value consumer props...]
// Runs until STOP_FILE exists. RATE_PER_SEC (0 = unlimited) slows it so a second member can
// join midway. Prints "R <partition> <offset> <partition>:<seq>" per record,
// "ASSIGNED <p,p,...>", "REVOKED <p,p,...>" on rebalances, "CLOSED" at the end.
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class GroupConsumer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        String topic = args[2];
        String stopFile = args[3];
        long rate = Long.parseLong(args[4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("group.protocol", "classic");
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("max.poll.records", "500");
        props.put("session.timeout.ms", "10000");
        props.put("heartbeat.interval.ms", "1000");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        for (int i = 5; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        if ("consumer".equals(props.get("group.protocol"))) {
            // KIP-848: the broker owns these; the client refuses them.
            props.remove("session.timeout.ms");
            props.remove("heartbeat.interval.ms");
        }
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        Map<TopicPartition, OffsetAndMetadata> processed = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                    // Commit what we processed before giving the partitions away.
                    Map<TopicPartition, OffsetAndMetadata> mine = new HashMap<>();
                    for (TopicPartition tp : parts) {
                        if (processed.containsKey(tp)) mine.put(tp, processed.get(tp));
                    }
                    if (!mine.isEmpty()) commit(consumer, mine);
                    parts.forEach(processed::remove);
                    line(out, "REVOKED " + ids(parts));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                    line(out, "ASSIGNED " + ids(parts));
                }
            });
            long started = System.nanoTime();
            long consumed = 0;
            while (!Files.exists(Paths.get(stopFile))) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    out.write("R " + r.partition() + " " + r.offset() + " " + SeqFormat.key(r.value()) + "\n");
                    processed.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    consumed++;
                }
                out.flush();
                if (!recs.isEmpty()) commit(consumer, processed);
                if (rate > 0) {
                    long dueNanos = consumed * 1_000_000_000L / rate;
                    long sleepMs = (dueNanos - (System.nanoTime() - started)) / 1_000_000L;
                    if (sleepMs > 0) Thread.sleep(sleepMs);
                }
            }
        }
        line(out, "CLOSED");
    }

    // KIP-848: a commit racing with an epoch bump fails with STALE_MEMBER_EPOCH; Kafka says to
    // retry once the heartbeat delivered the new epoch (the partitions are still ours).
    static void commit(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, OffsetAndMetadata> offsets) {
        for (int attempt = 0; ; attempt++) {
            try {
                consumer.commitSync(offsets);
                return;
            } catch (org.apache.kafka.clients.consumer.CommitFailedException e) {
                boolean stale = String.valueOf(e.getMessage()).contains("stale member epoch");
                if (!stale || attempt >= 50) throw e;
                System.err.println("commit retry after: " + e.getMessage());
                try {
                    Thread.sleep(100);
                } catch (InterruptedException ie) {
                    throw new RuntimeException(ie);
                }
            }
        }
    }

    static String ids(Collection<TopicPartition> parts) {
        return parts.stream().map(tp -> Integer.toString(tp.partition())).sorted().collect(Collectors.joining(","));
    }

    static void line(BufferedWriter out, String s) {
        try {
            out.write(s + "\n");
            out.flush();
        } catch (java.io.IOException e) {
            throw new RuntimeException(e);
        }
    }
}
