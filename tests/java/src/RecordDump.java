// Reads every partition of a topic from the beginning to its end offset (the LSO under
// read_committed) with a plain KafkaConsumer (assign + seekToBeginning, no group).
// Usage: RecordDump BOOTSTRAP TOPIC read_committed|read_uncommitted records|timestamps|digest
//        [key=value consumer props...] (e.g. security.protocol=SSL)
// "records" prints "R <partition> <offset> <key> <value> <header-keys>" per record; both modes
// print "D <partition> <count> <first> <last> <hash>" per partition, where hash folds offset,
// timestamp, key, value and headers of every record in order, and "END" at the end.
// "timestamps" prints the R lines with " <timestampType> <timestamp>" appended.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class RecordDump {
    static String text(byte[] b) {
        return b == null ? "-" : new String(b, StandardCharsets.UTF_8).replace(' ', '_');
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String isolation = args[2];
        boolean timestamps = args[3].equals("timestamps");
        boolean records = args[3].equals("records") || timestamps;
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("isolation.level", isolation);
        props.put("enable.auto.commit", "false");
        props.put("max.poll.records", "5000");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo pi : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                tps.add(new TopicPartition(topic, pi.partition()));
            }
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            Map<Integer, long[]> stats = new HashMap<>(); // count, first, last, hash
            for (TopicPartition tp : tps) stats.put(tp.partition(), new long[] {0, -1, -1, 17});
            long deadline = System.currentTimeMillis() + 180_000;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : tps) {
                    if (c.position(tp) < end.get(tp)) done = false;
                }
                if (done) break;
                if (System.currentTimeMillis() > deadline) {
                    System.err.println("timeout: positions below end offsets " + end);
                    System.exit(2);
                }
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                    if (r.offset() >= end.get(new TopicPartition(topic, r.partition()))) continue;
                    long[] s = stats.get(r.partition());
                    s[0]++;
                    if (s[1] < 0) s[1] = r.offset();
                    s[2] = r.offset();
                    long h = s[3];
                    h = h * 31 + r.offset();
                    h = h * 31 + r.timestamp();
                    h = h * 31 + (r.key() == null ? -1 : java.util.Arrays.hashCode(r.key()));
                    h = h * 31 + (r.value() == null ? -1 : java.util.Arrays.hashCode(r.value()));
                    StringBuilder hk = new StringBuilder();
                    for (Header hd : r.headers()) {
                        h = h * 31 + hd.key().hashCode();
                        h = h * 31 + java.util.Arrays.hashCode(hd.value());
                        hk.append(hd.key()).append('=').append(text(hd.value())).append(',');
                    }
                    s[3] = h;
                    if (records) {
                        out.append("R ").append(r.partition()).append(' ').append(r.offset()).append(' ')
                            .append(text(r.key())).append(' ').append(text(r.value())).append(' ')
                            .append(hk.length() == 0 ? "-" : hk.toString());
                        if (timestamps) {
                            out.append(' ').append(r.timestampType().name).append(' ').append(r.timestamp());
                        }
                        out.append('\n');
                    }
                }
            }
            for (TopicPartition tp : tps) {
                long[] s = stats.get(tp.partition());
                out.append("D ").append(tp.partition()).append(' ').append(s[0]).append(' ').append(s[1])
                    .append(' ').append(s[2]).append(' ').append(Long.toHexString(s[3])).append('\n');
            }
        }
        out.append("END\n");
        System.out.print(out);
        System.out.flush();
    }
}
