// An unmodified Qpid JMS client doing one JMS scenario against an AMQP 1.0 broker, for the
// integration tests.  It prints what happened as JSON lines on stdout; the last one is
// {"scenario": ..., "ok": true, ...} with the figures, or {"scenario": ..., "error": ...} (exit 1).
//
//   javac -cp "$(cat classpath.txt)" -d BUILD JmsDriver.java
//   java -cp "BUILD:$(cat classpath.txt)" JmsDriver --port P --scenario NAME --address A
//        [--count N] [--durable] [--host 127.0.0.1] [--user guest --password guest]
//        [--vhost NAME] [--client-id ID] [--subscription NAME] [--topic NAME]
//        [--sasl-mechanisms SCRAM-SHA-256]   (Qpid JMS's URI option amqp.saslMechanisms)
//
// (or without javac, as a single-file source: java -cp "$(cat classpath.txt)" JmsDriver.java ...)
//
// Scenarios:
//   send-receive          N TextMessages (PERSISTENT with --durable, else NON_PERSISTENT), then
//                         receive N on an AUTO_ACKNOWLEDGE session
//   transacted            a transacted session: N sent and rolled back (nothing arrives), N sent
//                         and committed; received and rolled back (redelivered), received again
//                         and committed (the queue is then empty)
//   transacted-forward    N persistent on --address; a transacted session receives each and sends
//                         it on to --forward-to in one transaction: rolled back (the source keeps
//                         them, the target gets none), then committed (the target has the N in
//                         order, the source none)
//   selector              N with property color red/blue alternating; a consumer with the
//                         selector "color = 'red'" gets the red ones, a plain consumer the rest
//   browse                N sent; a QueueBrowser enumerates N; a consumer then still gets N
//   reply-to              a TemporaryQueue as JMSReplyTo; a responder answers to it with the
//                         request's JMSCorrelationID; the temporary queue is deleted after
//   durable-subscription  a durable subscription (client id, subscription name) on --topic,
//                         closed; N published; a new connection with the same client id
//                         re-creates it and gets the N; then unsubscribes
//   shared-durable-subscription  two shared durable consumers (JMS 2.0) of --subscription on
//                         --topic, closed; N published; a new connection's two consumers of
//                         it get the N between them, each once; then unsubscribes
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Destination;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.qpid.jms.JmsConnectionFactory;

public class JmsDriver {
    static final long WAIT_MS = 10_000;   // for a message that must come
    static final long QUIET_MS = 1_000;   // for one that must not

    final Map<String, String> opt = new HashMap<>();
    final int count;
    final String address;

    JmsDriver(String[] args) {
        opt.put("host", "127.0.0.1");
        opt.put("user", "guest");
        opt.put("password", "guest");
        opt.put("count", "10");
        opt.put("client-id", "jms-driver");
        opt.put("subscription", "jms-driver-sub");
        opt.put("topic", "amq.topic");
        for (int i = 0; i < args.length; i++) {
            String k = args[i].replaceFirst("^--", "");
            opt.put(k, k.equals("durable") ? "true" : args[++i]);
        }
        count = Integer.parseInt(opt.get("count"));
        address = opt.get("address");
    }

    public static void main(String[] args) {
        JmsDriver d = new JmsDriver(args);
        String scenario = d.opt.get("scenario");
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", scenario);
        try {
            d.run(scenario, out);
            out.put("ok", true);
            emit(out);
            System.exit(0);
        } catch (Throwable e) {
            out.put("error", e.toString());
            emit(out);
            System.exit(1);
        }
    }

    Connection connect(String clientId) throws Exception {
        List<String> query = new ArrayList<>();
        if (opt.containsKey("vhost")) {
            query.add("amqp.vhost=" + opt.get("vhost"));
        }
        if (opt.containsKey("sasl-mechanisms")) {     // Qpid JMS's own URI option
            query.add("amqp.saslMechanisms=" + opt.get("sasl-mechanisms"));
        }
        String uri = "amqp://" + opt.get("host") + ":" + opt.get("port")
                + (query.isEmpty() ? "" : "?" + String.join("&", query));
        Connection c = new JmsConnectionFactory(opt.get("user"), opt.get("password"), uri).createConnection();
        if (clientId != null) {
            c.setClientID(clientId);
        }
        c.start();
        return c;
    }

    void run(String scenario, Map<String, Object> out) throws Exception {
        switch (scenario) {
            case "send-receive": sendReceive(out); break;
            case "transacted": transacted(out); break;
            case "transacted-forward": transactedForward(out); break;
            case "selector": selector(out); break;
            case "browse": browse(out); break;
            case "reply-to": replyTo(out); break;
            case "durable-subscription": durableSubscription(out); break;
            case "shared-durable-subscription": sharedDurableSubscription(out); break;
            default: throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    int send(Session s, Destination to, int n, boolean persistent) throws Exception {
        MessageProducer p = s.createProducer(to);
        p.setDeliveryMode(persistent ? DeliveryMode.PERSISTENT : DeliveryMode.NON_PERSISTENT);
        for (int i = 0; i < n; i++) {
            TextMessage m = s.createTextMessage("message " + i);
            m.setIntProperty("i", i);
            m.setStringProperty("color", i % 2 == 0 ? "red" : "blue");
            p.send(m);
        }
        p.close();
        return n;
    }

    static List<Message> receive(MessageConsumer c, int n, long waitMs) throws Exception {
        List<Message> got = new ArrayList<>();
        while (got.size() < n) {
            Message m = c.receive(waitMs);
            if (m == null) {
                break;
            }
            got.add(m);
        }
        return got;
    }

    static boolean inOrder(List<Message> got) throws Exception {
        for (int i = 0; i < got.size(); i++) {
            if (!("message " + i).equals(((TextMessage) got.get(i)).getText())) {
                return false;
            }
        }
        return true;
    }

    void sendReceive(Map<String, Object> out) throws Exception {
        boolean durable = opt.containsKey("durable");
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(address);
            out.put("sent", send(s, q, count, durable));
            MessageConsumer consumer = s.createConsumer(q);
            List<Message> got = receive(consumer, count, WAIT_MS);
            out.put("received", got.size());
            out.put("in_order", inOrder(got));
            boolean allPersistent = true;
            for (Message m : got) {
                allPersistent &= m.getJMSDeliveryMode() == DeliveryMode.PERSISTENT;
            }
            out.put("persistent", allPersistent);
        }
    }

    void transacted(Map<String, Object> out) throws Exception {
        try (Connection c = connect(null)) {
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            Queue q = tx.createQueue(address);
            send(tx, q, count, true);
            tx.rollback();
            MessageConsumer consumer = tx.createConsumer(q);
            out.put("after_rolled_back_send", receive(consumer, 1, QUIET_MS).size());
            send(tx, q, count, true);
            tx.commit();
            List<Message> first = receive(consumer, count, WAIT_MS);
            out.put("received_then_rolled_back", first.size());
            tx.rollback();
            List<Message> again = receive(consumer, count, WAIT_MS);
            boolean redelivered = !again.isEmpty();
            for (Message m : again) {
                redelivered &= m.getJMSRedelivered();
            }
            out.put("redelivered", again.size());
            out.put("all_flagged_redelivered", redelivered);
            tx.commit();
            consumer.close();
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            out.put("left_after_commit", receive(plain.createConsumer(q), 1, QUIET_MS).size());
        }
    }

    void transactedForward(Map<String, Object> out) throws Exception {
        try (Connection c = connect(null)) {
            Session plain = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue source = plain.createQueue(address);
            Queue target = plain.createQueue(opt.get("forward-to"));
            out.put("sent", send(plain, source, count, true));
            Session tx = c.createSession(true, Session.SESSION_TRANSACTED);
            MessageConsumer in = tx.createConsumer(source);
            MessageProducer on = tx.createProducer(target);
            out.put("forwarded_then_rolled_back", forward(tx, in, on));
            tx.rollback();
            MessageConsumer peek = plain.createConsumer(target);
            out.put("target_after_rollback", receive(peek, 1, QUIET_MS).size());
            peek.close();
            out.put("forwarded_then_committed", forward(tx, in, on));
            tx.commit();
            in.close();
            List<Message> moved = receive(plain.createConsumer(target), count, WAIT_MS);
            out.put("target_after_commit", moved.size());
            out.put("in_order", inOrder(moved));
            out.put("source_after_commit", receive(plain.createConsumer(source), 1, QUIET_MS).size());
        }
    }

    int forward(Session tx, MessageConsumer in, MessageProducer on) throws Exception {
        List<Message> got = receive(in, count, WAIT_MS);
        for (Message m : got) {
            on.send(tx.createTextMessage(((TextMessage) m).getText()), DeliveryMode.PERSISTENT,
                    Message.DEFAULT_PRIORITY, Message.DEFAULT_TIME_TO_LIVE);
        }
        return got.size();
    }

    void selector(Map<String, Object> out) throws Exception {
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(address);
            out.put("sent", send(s, q, count, false));
            int red = (count + 1) / 2;
            MessageConsumer sel = s.createConsumer(q, "color = 'red'");
            List<Message> selected = receive(sel, count, QUIET_MS);
            sel.close();
            out.put("selected", selected.size());
            out.put("selected_colors", colors(selected));
            List<Message> rest = receive(s.createConsumer(q), count, QUIET_MS);
            out.put("rest", rest.size());
            out.put("rest_colors", colors(rest));
            out.put("expected_red", red);
        }
    }

    static List<String> colors(List<Message> ms) throws Exception {
        TreeSet<String> seen = new TreeSet<>();
        for (Message m : ms) {
            seen.add(m.getStringProperty("color"));
        }
        return new ArrayList<>(seen);
    }

    void browse(Map<String, Object> out) throws Exception {
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(address);
            out.put("sent", send(s, q, count, false));
            QueueBrowser browser = s.createBrowser(q);
            int browsed = 0;
            for (Enumeration<?> e = browser.getEnumeration(); e.hasMoreElements(); e.nextElement()) {
                browsed++;
            }
            browser.close();
            out.put("browsed", browsed);
            out.put("consumed_after_browse", receive(s.createConsumer(q), count, WAIT_MS).size());
        }
    }

    void replyTo(Map<String, Object> out) throws Exception {
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Queue q = s.createQueue(address);
            TemporaryQueue temporary = s.createTemporaryQueue();
            out.put("temporary_queue", temporary.getQueueName());
            MessageConsumer replies = s.createConsumer(temporary);
            TextMessage request = s.createTextMessage("ping");
            request.setJMSReplyTo(temporary);
            request.setJMSCorrelationID("request-1");
            s.createProducer(q).send(request);

            MessageConsumer responder = s.createConsumer(q);
            Message got = responder.receive(WAIT_MS);
            if (got == null) {
                throw new IllegalStateException("the request did not arrive");
            }
            TextMessage answer = s.createTextMessage("pong");
            answer.setJMSCorrelationID(got.getJMSCorrelationID());
            s.createProducer(got.getJMSReplyTo()).send(answer);
            responder.close();

            Message reply = replies.receive(WAIT_MS);
            out.put("reply", reply == null ? null : ((TextMessage) reply).getText());
            out.put("correlated", reply != null && "request-1".equals(reply.getJMSCorrelationID()));
            replies.close();
            temporary.delete();
            out.put("temporary_deleted", true);
        }
    }

    void durableSubscription(Map<String, Object> out) throws Exception {
        String clientId = opt.get("client-id"), name = opt.get("subscription");
        try (Connection c = connect(clientId)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(opt.get("topic"));
            s.createDurableConsumer(t, name).close();
        }
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            out.put("published_while_closed", send(s, s.createTopic(opt.get("topic")), count, true));
        }
        try (Connection c = connect(clientId)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            MessageConsumer sub = s.createDurableConsumer(s.createTopic(opt.get("topic")), name);
            List<Message> got = receive(sub, count, WAIT_MS);
            out.put("received_after_reconnect", got.size());
            out.put("in_order", inOrder(got));
            sub.close();
            s.unsubscribe(name);
            out.put("unsubscribed", true);
        }
    }

    void sharedDurableSubscription(Map<String, Object> out) throws Exception {
        String clientId = opt.get("client-id"), name = opt.get("subscription");
        try (Connection c = connect(clientId)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(opt.get("topic"));
            MessageConsumer one = s.createSharedDurableConsumer(t, name);
            MessageConsumer two = s.createSharedDurableConsumer(t, name);
            one.close();
            two.close();
        }
        try (Connection c = connect(null)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            out.put("published_while_closed", send(s, s.createTopic(opt.get("topic")), count, true));
        }
        try (Connection c = connect(clientId)) {
            Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
            Topic t = s.createTopic(opt.get("topic"));
            MessageConsumer one = s.createSharedDurableConsumer(t, name);
            MessageConsumer two = s.createSharedDurableConsumer(t, name);
            TreeSet<Integer> seen = new TreeSet<>();
            int total = 0;
            long deadline = System.currentTimeMillis() + WAIT_MS;
            while (total < count && System.currentTimeMillis() < deadline) {
                for (MessageConsumer consumer : new MessageConsumer[] {one, two}) {
                    Message m = consumer.receive(100);
                    if (m != null) {
                        seen.add(m.getIntProperty("i"));
                        total++;
                    }
                }
            }
            List<String> extra = new ArrayList<>();
            for (MessageConsumer consumer : new MessageConsumer[] {one, two}) {
                for (Message m = consumer.receive(QUIET_MS); m != null; m = consumer.receive(QUIET_MS)) {
                    total++;                   // a duplicate: more than were published
                    extra.add(m.getIntProperty("i") + (m.getJMSRedelivered() ? " redelivered" : ""));
                }
            }
            out.put("extra", extra);
            out.put("received_after_reconnect", total);
            out.put("distinct", seen.size());
            one.close();
            two.close();
            s.unsubscribe(name);
            out.put("unsubscribed", true);
        }
    }
    // ---- JSON lines without a JSON library

    static void emit(Map<String, Object> m) {
        System.out.println(json(m));
        System.out.flush();
    }

    static String json(Object v) {
        if (v == null) {
            return "null";
        }
        if (v instanceof Boolean || v instanceof Number) {
            return v.toString();
        }
        if (v instanceof Map) {
            StringBuilder b = new StringBuilder("{");
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                b.append(b.length() > 1 ? ", " : "").append(json(e.getKey().toString())).append(": ")
                        .append(json(e.getValue()));
            }
            return b.append("}").toString();
        }
        if (v instanceof List) {
            StringBuilder b = new StringBuilder("[");
            for (Object x : (List<?>) v) {
                b.append(b.length() > 1 ? ", " : "").append(json(x));
            }
            return b.append("]").toString();
        }
        StringBuilder b = new StringBuilder("\"");
        for (char ch : v.toString().toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
