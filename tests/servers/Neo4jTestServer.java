// A real Neo4j for the tests: the embeddable server from Maven Central with its Bolt connector on
// 127.0.0.1. Arguments: <home directory> <bolt port>. It prints "READY" when Bolt accepts connections
// and stops cleanly on SIGTERM (the JVM's shutdown hook); tests/servers/neo4j.py starts and stops it.
// Authentication is off: the server listens on the loopback only, for one test run.
import java.nio.file.Path;
import java.time.Duration;
import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;

public class Neo4jTestServer {
    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        DatabaseManagementService service = new DatabaseManagementServiceBuilder(home)
            .setConfig(BoltConnector.enabled, true)
            .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", port))
            .setConfig(GraphDatabaseSettings.auth_enabled, false)
            .setConfig(GraphDatabaseSettings.transaction_timeout, Duration.ofSeconds(60))
            .setConfig(GraphDatabaseSettings.pagecache_memory, 128L * 1024 * 1024)
            .build();
        service.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);  // waits until it is available
        Runtime.getRuntime().addShutdownHook(new Thread(service::shutdown));
        System.out.println("READY");
        System.out.flush();
        Thread.currentThread().join();
    }
}
