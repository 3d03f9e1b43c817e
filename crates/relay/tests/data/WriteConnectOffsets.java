// Writes a Kafka Connect standalone offsets file exactly as Kafka's
// FileOffsetBackingStore.save() does: Java serialization of a HashMap<byte[], byte[]>
// (key = the JSON offset key, value = the offset JSON, or null after a reset).
// Generates the fixture connect-offsets.dat for connect_offsets_file.rs's unit tests:
// and connect-offsets-two-prefixes.dat (one connector name under two topic.prefix values):
//   javac WriteConnectOffsets.java && java WriteConnectOffsets .
import java.io.FileOutputStream;
import java.io.ObjectOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

public class WriteConnectOffsets {
    public static void main(String[] args) throws Exception {
        Map<byte[], byte[]> raw = new HashMap<>();
        raw.put(bytes("[\"orders\",{\"server\":\"dbserver1\"}]"),
                bytes("{\"ts_sec\":1764700000,\"file\":\"binlog.000002\",\"pos\":1547,\"gtids\":\"0-1-41\",\"server_id\":1}"));
        raw.put(bytes("[\"billing\",{\"server\":\"dbserver1\"}]"),
                bytes("{\"file\":\"binlog.000001\",\"pos\":999}"));
        raw.put(bytes("[\"reset\",{\"server\":\"dbserver1\"}]"), null);
        save(raw, args[0] + "/connect-offsets.dat");
        Map<byte[], byte[]> twoPrefixes = new HashMap<>();
        twoPrefixes.put(bytes("[\"orders\",{\"server\":\"a\"}]"), bytes("{\"file\":\"binlog.000001\",\"pos\":4}"));
        twoPrefixes.put(bytes("[\"orders\",{\"server\":\"b\"}]"), bytes("{\"file\":\"binlog.000001\",\"pos\":8}"));
        save(twoPrefixes, args[0] + "/connect-offsets-two-prefixes.dat");
    }

    /** What FileOffsetBackingStore.save() does with its copied map. */
    private static void save(Map<byte[], byte[]> raw, String file) throws Exception {
        try (ObjectOutputStream os = new ObjectOutputStream(new FileOutputStream(file))) {
            os.writeObject(raw);
        }
    }

    private static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
