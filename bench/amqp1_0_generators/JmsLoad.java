// One side of the AMQP 1.0 benchmark's load on Qpid JMS (a candidate generator).
//
//   java -cp <build>:<Qpid JMS classpath> JmsLoad sender|receiver CONTROL_FILE key=value...
//
// The protocol of bench/amqp1_0_generators/load.js: the control block of
// bench/amqp1_0_load.py (little-endian int64 slots, memory-mapped here), the same
// options.  The sender sends BytesMessages of `size` bytes (System.nanoTime() --
// CLOCK_MONOTONIC -- little-endian in the first 8) asynchronously with a
// CompletionListener, at most `window` unsettled (a semaphore); PERSISTENT
// (durable=true) for the durable variant, NON_PERSISTENT otherwise; message ids
// and timestamps disabled.  The receiver is a MessageListener on an
// AUTO_ACKNOWLEDGE session (each message accepted after the listener returns),
// prefetch = `credit`.
import jakarta.jms.BytesMessage;
import jakarta.jms.CompletionListener;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.qpid.jms.JmsConnectionFactory;

public class JmsLoad {
    // control slots: keep in step with CONTROL in bench/amqp1_0_load.py
    static final int PHASE = 0, RATE = 1, RECORD = 2, SENT = 3, ACCEPTED = 4, RECEIVED = 5,
            READY_SENDER = 6, READY_RECEIVER = 7, BACKLOG = 8, OTHER_OUTCOMES = 9, BEHIND_MS = 10;
    static final int RUN_MAX = 1, RUN_RATE = 3, STOP = 4, SLOTS = 16;

    static MappedByteBuffer ctl;

    static long get(int i) { return ctl.getLong(i * 8); }

    static void put(int i, long v) { ctl.putLong(i * 8, v); }

    public static void main(String[] args) throws Exception {
        String role = args[0];
        try (FileChannel ch = FileChannel.open(Path.of(args[1]), StandardOpenOption.READ,
                StandardOpenOption.WRITE)) {
            ctl = ch.map(FileChannel.MapMode.READ_WRITE, 0, SLOTS * 8);
        }
        ctl.order(ByteOrder.LITTLE_ENDIAN);
        Map<String, String> o = new HashMap<>();
        for (int i = 2; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            o.put(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        String uri = "amqp://" + o.get("host") + ":" + o.get("port") + "?jms.prefetchPolicy.all="
                + o.get("credit") + (o.containsKey("hostname") ? "&amqp.vhost=" + o.get("hostname") : "");
        int ready = role.equals("sender") ? READY_SENDER : READY_RECEIVER;
        try {
            Connection conn = new JmsConnectionFactory(o.get("user"), o.get("password"), uri).createConnection();
            conn.start();
            Session session = conn.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue queue = session.createQueue(o.get("address"));
            if (role.equals("sender")) {
                send(session, queue, o);
            } else {
                receive(session, queue, o);
            }
            conn.close();
        } catch (Exception e) {
            put(ready, -1);
            System.err.println(role + ": " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    static void send(Session session, Queue queue, Map<String, String> o) throws Exception {
        MessageProducer producer = session.createProducer(queue);
        producer.setDeliveryMode("1".equals(o.get("durable")) ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT);
        producer.setDisableMessageID(true);
        producer.setDisableMessageTimestamp(true);
        int size = Integer.parseInt(o.get("size"));
        Semaphore window = new Semaphore(Integer.parseInt(o.get("window")));
        AtomicLong accepted = new AtomicLong(), other = new AtomicLong();
        CompletionListener done = new CompletionListener() {
            public void onCompletion(Message m) { accepted.incrementAndGet(); window.release(); }
            public void onException(Message m, Exception e) { other.incrementAndGet(); window.release(); }
        };
        put(READY_SENDER, 1);
        long sent = 0, rateT0 = 0, rateBase = 0, behindMs = 0;
        double rate = 0;
        int phase = 0;
        byte[] body = new byte[size];
        java.util.Arrays.fill(body, (byte) 'a');
        ByteBuffer stamp = ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN);
        while (true) {
            int p = (int) get(PHASE);
            if (p == RUN_RATE && phase != RUN_RATE) {
                rateT0 = System.nanoTime();
                rateBase = sent;
                rate = get(RATE) / 1000.0;
            }
            phase = p;
            put(SENT, sent);
            put(ACCEPTED, accepted.get());
            put(OTHER_OUTCOMES, other.get());
            put(BEHIND_MS, behindMs);
            if (phase == STOP) {
                return;
            }
            long due = 0;
            if (phase == RUN_MAX) {
                due = 1;
            } else if (phase == RUN_RATE) {
                due = (long) ((System.nanoTime() - rateT0) / 1e9 * rate) - (sent - rateBase);
                if (due > 1 && rate > 0) {
                    behindMs = Math.max(behindMs, Math.round((due - 1) / rate * 1000));
                }
            }
            if (due <= 0 || sent - get(RECEIVED) >= get(BACKLOG)) {
                LockSupport.parkNanos(phase == RUN_RATE ? 100_000 : 1_000_000);
                continue;
            }
            if (!window.tryAcquire(1, TimeUnit.MILLISECONDS)) {
                continue;
            }
            BytesMessage m = session.createBytesMessage();
            stamp.putLong(0, System.nanoTime());
            m.writeBytes(body);
            producer.send(m, done);
            sent++;
        }
    }

    static volatile boolean recording;

    static void receive(Session session, Queue queue, Map<String, String> o) throws Exception {
        MessageConsumer consumer = session.createConsumer(queue);
        AtomicLong received = new AtomicLong();
        double[][] samples = {new double[1 << 16]};
        int[] n = {0};
        byte[] head = new byte[8];
        ByteBuffer headLe = ByteBuffer.wrap(head).order(ByteOrder.LITTLE_ENDIAN);
        consumer.setMessageListener(m -> {
            long now = System.nanoTime();
            put(RECEIVED, received.incrementAndGet());
            if (!recording) {
                return;
            }
            try {
                ((BytesMessage) m).readBytes(head);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
            if (n[0] == samples[0].length) {
                samples[0] = java.util.Arrays.copyOf(samples[0], samples[0].length * 2);
            }
            samples[0][n[0]++] = now - headLe.getLong(0);
        });
        put(READY_RECEIVER, 1);
        while (get(PHASE) != STOP) {
            recording = get(RECORD) == 1;
            LockSupport.parkNanos(1_000_000);
        }
        consumer.close();
        ByteBuffer out = ByteBuffer.allocate(n[0] * 8).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n[0]; i++) {
            out.putDouble(samples[0][i]);
        }
        try (FileOutputStream f = new FileOutputStream(o.get("samples"))) {
            f.write(out.array());
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }
}
