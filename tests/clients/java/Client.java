// The RabbitMQ Java client (Debian's librabbitmq-client-java) as its API guide shows it, with no connection
// name unless CONNECTION_NAME gives one: one behaviour per run, until killed.
// Usage: AMQP_URL=amqp://... java -cp amqp-client.jar:slf4j-api.jar:slf4j-nop.jar Client.java <mode> <queue>
//   tx-publisher       publishes 5 a second, one transaction per message (txSelect, txCommit)
//   qos-after-consume  basicConsume with manual ack, then basicQos(10): the qos binds later consumers only,
//                      so this one stays unlimited; it never acks
//   stalled-consumer   basicQos(5) and a manual-ack consumer on a quorum queue that never acks (a hung handler)
//   confirm-each       confirmSelect, then persistent messages without pause, waitForConfirmsOrDie after each
//                      (the reliability guide's example)
//   confirm-stream     confirmSelect, then persistent messages into a quorum queue without pause, confirms handled
//                      as they come by a ConfirmListener, at most 8 unconfirmed, each free place filled at once
//                      (the confirms tutorial's third strategy)
//   double-ack         a worker taking each job on a new channel (the client numbers them upwards): publish one,
//                      basicGet it, work 2 s, basicAck its delivery tag twice; the broker closes the channel
//                      (PRECONDITION_FAILED - unknown delivery tag) and the connection stays
import com.rabbitmq.client.*;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.Semaphore;

public class Client {
    public static void main(String[] args) throws Exception {
        String mode = args[0], queue = args[1];
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(System.getenv("AMQP_URL"));
        Connection conn = factory.newConnection(System.getenv("CONNECTION_NAME"));
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try { conn.close(); } catch (Exception ignored) { /* already gone: nothing to release */ }
        }));
        Channel ch = conn.createChannel();
        // A publisher as fast as it can go is bounded: it fills no disk.
        Map<String, Object> arguments = switch (mode) {
            case "stalled-consumer" -> Map.of("x-expires", 600000, "x-queue-type", "quorum");
            case "confirm-each" -> Map.of("x-expires", 600000, "x-max-length", 10000);
            case "confirm-stream" -> Map.of("x-expires", 600000, "x-max-length", 10000, "x-queue-type", "quorum");
            default -> Map.of("x-expires", 600000);
        };
        ch.queueDeclare(queue, true, false, false, arguments);
        switch (mode) {
            case "tx-publisher" -> {
                ch.txSelect();
                System.out.println("ready");
                while (true) {
                    ch.basicPublish("", queue, MessageProperties.PERSISTENT_BASIC, "order".getBytes());
                    ch.txCommit();
                    Thread.sleep(200);
                }
            }
            case "qos-after-consume" -> {
                ch.basicConsume(queue, false, new DefaultConsumer(ch));
                ch.basicQos(10);
                System.out.println("ready");
                Thread.sleep(Long.MAX_VALUE);
            }
            case "stalled-consumer" -> {
                ch.basicQos(5);
                ch.basicConsume(queue, false, new DefaultConsumer(ch));
                System.out.println("ready");
                Thread.sleep(Long.MAX_VALUE);
            }
            case "confirm-each" -> {
                ch.confirmSelect();
                System.out.println("ready");
                while (true) {
                    ch.basicPublish("", queue, MessageProperties.PERSISTENT_BASIC, "order".getBytes());
                    // A minute: in CI's parallel phase a confirm on 3.10 took more than 5 s, and the client died.
                    ch.waitForConfirmsOrDie(60000);
                }
            }
            case "confirm-stream" -> {
                ch.confirmSelect();
                Semaphore window = new Semaphore(8);
                ConcurrentSkipListSet<Long> unconfirmed = new ConcurrentSkipListSet<>();
                // An ack and a nack both free a place in the window: this publisher streams, it keeps nothing to resend.
                ConfirmCallback settled = (tag, multiple) -> {
                    Set<Long> done = multiple ? unconfirmed.headSet(tag, true) : unconfirmed.subSet(tag, true, tag, true);
                    int n = done.size();
                    done.clear();
                    window.release(n);
                };
                ch.addConfirmListener(settled, settled);
                System.out.println("ready");
                while (true) {
                    // Whatever the window has free, written at once: a CPU-starved run that wrote one at a time
                    // paced itself at the confirms' round trip, which the broker cannot tell from waiting for each.
                    window.acquire();
                    for (int free = 1 + window.drainPermits(); free > 0; free--) {
                        unconfirmed.add(ch.getNextPublishSeqNo());
                        ch.basicPublish("", queue, MessageProperties.PERSISTENT_BASIC, "order".getBytes());
                    }
                }
            }
            case "double-ack" -> {
                System.out.println("ready");
                while (true) {
                    Channel round = conn.createChannel();
                    round.basicPublish("", queue, MessageProperties.PERSISTENT_BASIC, "job".getBytes());
                    GetResponse got = round.basicGet(queue, false);
                    Thread.sleep(2000);  // the job's work, its channel open meanwhile
                    if (got != null) {
                        round.basicAck(got.getEnvelope().getDeliveryTag(), false);
                        round.basicAck(got.getEnvelope().getDeliveryTag(), false);
                    }
                }
            }
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }
}
