// Produces records whose values carry their partition and per-partition sequence number, so
// tests can check exactly-once and per-partition order on the consuming side.
// Usage: SeqProducer BOOTSTRAP TOPIC PARTITIONS RECORDS [key=value producer props...]
// (seqproducer.rate=N is ours, not the producer's: send at most N records per second;
// seqproducer.stop=PATH too: stop sending once PATH exists, then flush and finish).
// Prints "ACK <partition> <seq> <offset>" for every acknowledged record, "ERR <partition>
// <seq> <error>" for every failed one, and "DONE <acked> <errors>" at the end.
import java.io.BufferedWriter;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class SeqProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long records = Long.parseLong(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        props.put("linger.ms", "5");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        double rate = 0;
        java.nio.file.Path stop = null;
        for (int i = 4; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            String k = args[i].substring(0, eq);
            String v = args[i].substring(eq + 1);
            if (k.equals("seqproducer.rate")) {
                rate = Double.parseDouble(v);
            } else if (k.equals("seqproducer.stop")) {
                stop = java.nio.file.Paths.get(v);
            } else {
                props.put(k, v);
            }
        }
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        AtomicLong acked = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        Object lock = new Object();
        // Acks must reach stdout while the producer runs: tests kill the broker mid-stream.
        Thread flusher = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(100);
                    synchronized (lock) {
                        out.flush();
                    }
                } catch (Exception e) {
                    return;
                }
            }
        });
        flusher.setDaemon(true);
        flusher.start();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            long started = System.nanoTime();
            for (long i = 0; i < records; i++) {
                if (stop != null && i % 50 == 0 && java.nio.file.Files.exists(stop)) break;
                if (rate > 0) {
                    long due = started + (long) (i * 1e9 / rate);
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                int p = (int) (i % partitions);
                long seq = i / partitions;
                byte[] value = SeqFormat.value(p, seq);
                try {
                    producer.send(new ProducerRecord<>(topic, p, null, value), (md, e) -> {
                        synchronized (lock) {
                            try {
                                if (e == null) {
                                    acked.incrementAndGet();
                                    out.write("ACK " + p + " " + seq + " " + md.offset() + "\n");
                                } else {
                                    errors.incrementAndGet();
                                    out.write("ERR " + p + " " + seq + " " + e.getClass().getSimpleName() + "\n");
                                }
                            } catch (java.io.IOException io) {
                                throw new RuntimeException(io);
                            }
                        }
                    });
                } catch (Exception e) {
                    synchronized (lock) {
                        errors.incrementAndGet();
                        out.write("ERR " + p + " " + seq + " " + e.getClass().getSimpleName() + "\n");
                    }
                }
            }
            producer.flush();
        }
        synchronized (lock) {
            out.write("DONE " + acked.get() + " " + errors.get() + "\n");
            out.flush();
        }
    }
}
