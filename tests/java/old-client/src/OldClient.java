// Apache Kafka's Java client 2.1.1 (the oldest Kafka 4 serves): produces N records with
// idempotence, consumes them in a group from the beginning, commits, and prints what it read
// and the committed offsets, so the test can assert them exactly.
// Usage: OldClient BOOTSTRAP TOPIC GROUP N
// Prints "rec P O VALUE" per record read, then "committed P O" per partition.
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.*;

public class OldClient {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int n = Integer.parseInt(args[3]);
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("acks", "all");
        pp.put("enable.idempotence", "true");
        pp.put("compression.type", "lz4");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, "k" + i, "v" + i)).get();
            }
        }
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("group.id", group);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            c.subscribe(Collections.singletonList(topic));
            int got = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    System.out.println("rec " + r.partition() + " " + r.offset() + " " + r.value());
                    got++;
                }
            }
            c.commitSync();
            List<PartitionInfo> parts = c.partitionsFor(topic);
            for (PartitionInfo pi : parts) {
                TopicPartition tp = new TopicPartition(topic, pi.partition());
                OffsetAndMetadata om = c.committed(tp);
                System.out.println("committed " + pi.partition() + " " + (om == null ? -1 : om.offset()));
            }
            // The beginning and end offsets, through ListOffsets.
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : parts) tps.add(new TopicPartition(topic, pi.partition()));
            Map<TopicPartition, Long> b = c.beginningOffsets(tps), e = c.endOffsets(tps);
            for (TopicPartition tp : tps) {
                System.out.println("bounds " + tp.partition() + " " + b.get(tp) + " " + e.get(tp));
            }
        }
    }
}
