// Transactional producer for the mirroring tests: committed and aborted transactions, records
// with duplicate header keys, and optionally one transaction left open at the end.
// Usage: TxnProducer BOOTSTRAP TOPIC PARTITIONS TXNS PER_TXN ABORT_EVERY OPEN_AT_END [key=value props...]
// Transaction i (0-based) is aborted when ABORT_EVERY > 0 and i % ABORT_EVERY == ABORT_EVERY - 1,
// committed otherwise. Record values are "<C|A|O>:<txn>:<n>:" padded to 64 bytes (C committed,
// A aborted, O open). Every record carries headers dup=1, dup=2 (the same key twice).
// Prints "COMMITTED <txn>", "ABORTED <txn>", and, if OPEN_AT_END is true, "OPEN" once the open
// transaction's records are on the broker; it then sleeps until killed. Prints "DONE" otherwise.
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProducer {
    static byte[] value(char kind, int txn, int n) {
        StringBuilder sb = new StringBuilder();
        sb.append(kind).append(':').append(txn).append(':').append(n).append(':');
        while (sb.length() < 64) sb.append('.');
        return sb.toString().getBytes(StandardCharsets.US_ASCII);
    }

    static void send(KafkaProducer<byte[], byte[]> p, String topic, int partitions, char kind, int txn, int perTxn) {
        for (int n = 0; n < perTxn; n++) {
            RecordHeaders h = new RecordHeaders();
            h.add("dup", "1".getBytes(StandardCharsets.US_ASCII));
            h.add("dup", "2".getBytes(StandardCharsets.US_ASCII));
            byte[] key = ("k" + (n % 17)).getBytes(StandardCharsets.US_ASCII);
            p.send(new ProducerRecord<>(topic, n % partitions, null, key, value(kind, txn, n), h));
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int txns = Integer.parseInt(args[3]);
        int perTxn = Integer.parseInt(args[4]);
        int abortEvery = Integer.parseInt(args[5]);
        boolean openAtEnd = Boolean.parseBoolean(args[6]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", "txn-" + topic);
        props.put("transaction.timeout.ms", "600000");
        props.put("linger.ms", "5");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        for (int i = 7; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            props.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props);
        p.initTransactions();
        for (int t = 0; t < txns; t++) {
            boolean abort = abortEvery > 0 && t % abortEvery == abortEvery - 1;
            p.beginTransaction();
            send(p, topic, partitions, abort ? 'A' : 'C', t, perTxn);
            p.flush();
            if (abort) {
                p.abortTransaction();
                System.out.println("ABORTED " + t);
            } else {
                p.commitTransaction();
                System.out.println("COMMITTED " + t);
            }
            System.out.flush();
        }
        if (openAtEnd) {
            p.beginTransaction();
            send(p, topic, partitions, 'O', txns, perTxn);
            p.flush();
            System.out.println("OPEN");
            System.out.flush();
            Thread.sleep(Long.MAX_VALUE);
        }
        p.close();
        System.out.println("DONE");
    }
}
