// client-v2 (Java) against serve-clickhouse, at the client's defaults.
// Run by serve_clients_test.go as `java -cp 'libs/*' ClientCheck.java`
// with SH_HOST, SH_PORT, SH_USER, SH_PASSWORD, SH_DATABASE and SH_TABLE
// set; prints one JSON object per step.
import com.clickhouse.client.api.Client;
import com.clickhouse.client.api.ServerException;
import com.clickhouse.client.api.query.GenericRecord;
import com.clickhouse.client.api.query.QueryResponse;
import com.clickhouse.client.api.data_formats.ClickHouseBinaryFormatReader;
import com.clickhouse.data.ClickHouseFormat;

import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;

public class ClientCheck {
    static final Map<String, String> env = System.getenv();

    static Client client(boolean compressRequest) {
        Client.Builder b = new Client.Builder()
                .addEndpoint("http://" + env.get("SH_HOST") + ":" + env.get("SH_PORT") + "/")
                .setUsername(env.get("SH_USER"))
                .setPassword(env.get("SH_PASSWORD"))
                .setDefaultDatabase(env.get("SH_DATABASE"));
        if (compressRequest) {
            b.compressClientRequest(true);
        }
        return b.build();
    }

    static String q(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\t", "\\t").replace("\n", "\\n") + "\"";
    }

    static void say(String step, String... kv) {
        StringBuilder sb = new StringBuilder("{\"step\":").append(q(step));
        for (int i = 0; i + 1 < kv.length; i += 2) {
            sb.append(",").append(q(kv[i])).append(":").append(kv[i + 1]);
        }
        System.out.println(sb.append("}"));
    }

    static String[] codeOf(Callable<?> fn) {
        try {
            fn.call();
        } catch (Throwable t) {
            Throwable c = t;
            while (c != null && !(c instanceof ServerException)) {
                c = c.getCause();
            }
            if (c == null) {
                return new String[] {"code", q("not a ServerException: " + t), "message", q(String.valueOf(t.getMessage()))};
            }
            String msg = String.valueOf(c.getMessage());
            return new String[] {"code", q(String.valueOf(((ServerException) c).getCode())), "message", q(msg.substring(0, Math.min(300, msg.length())))};
        }
        return new String[] {"code", q("none")};
    }

    static byte[] tsv(String prefix, int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            sb.append(prefix).append(i % 10).append('\t').append(i).append('\n');
        }
        return sb.toString().getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        String table = env.get("SH_TABLE");
        // Defaults: compressed responses (compress=1, ClickHouse's LZ4
        // blocks), uncompressed requests, RowBinaryWithNamesAndTypes.
        try (Client c = client(false); Client cc = client(true)) {
            List<GenericRecord> rows = c.queryAll("SELECT number AS n, toString(number) AS s FROM system.numbers LIMIT 3");
            List<String> out = new ArrayList<>();
            for (GenericRecord r : rows) {
                out.add("[" + q(String.valueOf(r.getLong("n"))) + "," + q(r.getString("s")) + "]");
            }
            say("query", "rows", "[" + String.join(",", out) + "]");

            c.execute("CREATE TABLE " + table + " (host String, v UInt32) ENGINE = MergeTree ORDER BY host").get(30, TimeUnit.SECONDS);
            c.insert(table, new ByteArrayInputStream(tsv("h", 1000)), ClickHouseFormat.TabSeparated).get(30, TimeUnit.SECONDS);
            GenericRecord r = c.queryAll("SELECT count() AS c, sum(v) AS s FROM " + table).get(0);
            say("insert", "count", q(r.getBigInteger("c").toString()), "sum", q(r.getBigInteger("s").toString()));

            r = c.queryAll("SELECT count() AS c, sum(v) AS s FROM " + table + " WHERE host = {h:String} AND v >= {min:UInt32}",
                    Map.of("h", "h3", "min", 500)).get(0);
            say("params", "count", q(r.getBigInteger("c").toString()), "sum", q(r.getBigInteger("s").toString()));
            // client-v2 sends a String parameter as it is, not in the escaped
            // text form the interface parses (a ClickHouse server does the
            // same with it): no backslash or tab here, unlike the other clients.
            String tricky = "it's a \"quote\"'); DROP TABLE x; --";
            r = c.queryAll("SELECT {s:String} AS s, length({s:String}) AS n", Map.of("s", tricky)).get(0);
            say("params_quote", "echoed", String.valueOf(tricky.equals(r.getString("s"))), "length", q(String.valueOf(r.getLong("n"))));

            // LZ4 blocks both ways: decompress=1 requests as well.
            cc.insert(table, new ByteArrayInputStream(tsv("lz4-", 1000)), ClickHouseFormat.TabSeparated).get(30, TimeUnit.SECONDS);
            long n = 0;
            java.math.BigInteger sum = java.math.BigInteger.ZERO;
            try (QueryResponse resp = cc.query("SELECT number FROM system.numbers LIMIT 200000").get(30, TimeUnit.SECONDS)) {
                ClickHouseBinaryFormatReader reader = cc.newBinaryFormatReader(resp);
                while (reader.hasNext()) {
                    reader.next();
                    sum = sum.add(reader.getBigInteger("number"));
                    n++;
                }
            }
            r = cc.queryAll("SELECT count() AS c FROM " + table + " WHERE startsWith(host, 'lz4-')").get(0);
            say("compressed_lz4", "rows", q(String.valueOf(n)), "sum", q(sum.toString()), "inserted", q(r.getBigInteger("c").toString()));

            say("error_unknown_table", codeOf(() -> c.queryAll("SELECT * FROM no_such_table")));
            say("error_bad_param", codeOf(() -> c.queryAll("SELECT {n:UInt32}", Map.of("n", "abc"))));
            // serve-clickhouse has no sessions: a statement that needs one is NOT_IMPLEMENTED.
            say("error_not_implemented", codeOf(() -> c.execute("CREATE TEMPORARY TABLE tmp (x UInt8)").get(30, TimeUnit.SECONDS)));
        }
    }
}
