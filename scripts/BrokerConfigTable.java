import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
// Prints, for every Kafka 4.1 broker config: name, dynamic update mode, type, and the
// bounds of a numeric range validator ("-" when none).
public class BrokerConfigTable {
    static String field(Object o, String f) throws Exception {
        var fl = o.getClass().getDeclaredField(f); fl.setAccessible(true);
        Object v = fl.get(o); return v == null ? "-" : v.toString();
    }
    public static void main(String[] a) throws Exception {
        Object mod = Class.forName("kafka.server.DynamicBrokerConfig$").getField("MODULE$").get(null);
        @SuppressWarnings("unchecked")
        Map<String,String> modes = (Map<String,String>) mod.getClass().getMethod("dynamicConfigUpdateModes").invoke(mod);
        ConfigDef def = (ConfigDef) Class.forName("kafka.server.KafkaConfig").getMethod("configDef").invoke(null);
        Set<String> ssl = org.apache.kafka.common.config.SslConfigs.RECONFIGURABLE_CONFIGS;
        TreeMap<String,String> out = new TreeMap<>();
        for (var e : def.configKeys().entrySet()) {
            String n = e.getKey();
            String mode = modes.getOrDefault(n, "read-only");
            if (ssl.contains(n)) mode = "listener-only";
            String lo = "-", hi = "-";
            if (e.getValue().validator instanceof ConfigDef.Range r) { lo = field(r, "min"); hi = field(r, "max"); }
            out.put(n, mode + " " + e.getValue().type.name() + " " + lo + " " + hi);
        }
        for (var e : out.entrySet()) System.out.println(e.getKey() + " " + e.getValue());
    }
}
