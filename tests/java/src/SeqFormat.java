// The value layout shared by SeqProducer and GroupConsumer (and tests/python): the ASCII text
// "<partition>:<seq>:" padded with '.' to 100 bytes.
import java.nio.charset.StandardCharsets;

final class SeqFormat {
    static final int SIZE = 100;

    static byte[] value(int partition, long seq) {
        StringBuilder sb = new StringBuilder(SIZE);
        sb.append(partition).append(':').append(seq).append(':');
        while (sb.length() < SIZE) sb.append('.');
        return sb.toString().getBytes(StandardCharsets.US_ASCII);
    }

    /** "<partition>:<seq>" of a value, or the raw text if it is not ours. */
    static String key(byte[] value) {
        String s = new String(value, StandardCharsets.US_ASCII);
        int second = s.indexOf(':', s.indexOf(':') + 1);
        return second < 0 ? s : s.substring(0, second);
    }
}
