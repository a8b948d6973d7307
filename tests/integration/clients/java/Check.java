// Drives a broker with the RabbitMQ Java client, unmodified, and prints one JSON
// line of what it observed; tests/integration/test_other_clients.py asserts on it.
import com.rabbitmq.client.*;

import java.nio.charset.StandardCharsets;
import java.util.*;
import java.util.concurrent.*;

public class Check {
    public static void main(String[] args) throws Exception {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(args[0]);
        Map<String, Object> seen = new LinkedHashMap<>();
        try (Connection conn = factory.newConnection()) {
            seen.put("serverProduct", conn.getServerProperties().get("product").toString());
            Channel ch = conn.createChannel();
            ch.confirmSelect();
            String q = ch.queueDeclare("", false, true, true,
                    Map.of("x-max-priority", 5)).getQueue();
            for (int i = 0; i < 50; i++) {
                AMQP.BasicProperties props = new AMQP.BasicProperties.Builder()
                        .priority(i % 2 == 0 ? 1 : 5).headers(Map.of("n", i)).build();
                ch.basicPublish("", q, props, ("m" + i).getBytes(StandardCharsets.UTF_8));
            }
            seen.put("confirmed", ch.waitForConfirms(10_000));
            BlockingQueue<String> returned = new LinkedBlockingQueue<>();
            ch.addReturnListener(r -> returned.add(r.getReplyText()));
            ch.basicPublish("amq.direct", "nobody", true, null, "lost".getBytes(StandardCharsets.UTF_8));
            seen.put("returned", returned.poll(10, TimeUnit.SECONDS));
            ch.basicQos(10);
            List<Integer> priorities = new ArrayList<>();
            CountDownLatch all = new CountDownLatch(50);
            ch.basicConsume(q, false, (tag, delivery) -> {
                priorities.add(delivery.getProperties().getPriority());
                ch.basicAck(delivery.getEnvelope().getDeliveryTag(), false);
                all.countDown();
            }, tag -> { });
            seen.put("allDelivered", all.await(10, TimeUnit.SECONDS));
            // a priority queue hands out the 25 priority-5 messages first
            seen.put("highFirst", priorities.subList(0, 25).stream().allMatch(p -> p == 5));
            Channel probe = conn.createChannel();
            try {
                probe.queueDeclarePassive("no-such-queue-" + ProcessHandle.current().pid());
                seen.put("passiveMissing", 0);
            } catch (java.io.IOException e) {
                ShutdownSignalException sse = (ShutdownSignalException) e.getCause();
                seen.put("passiveMissing", ((AMQP.Channel.Close) sse.getReason()).getReplyCode());
            }
            seen.put("stillUsable", ch.isOpen() && ch.queueDeclarePassive(q).getQueue().equals(q));
        }
        StringBuilder json = new StringBuilder("{");
        for (Map.Entry<String, Object> e : seen.entrySet()) {
            if (json.length() > 1) json.append(',');
            Object v = e.getValue();
            json.append('"').append(e.getKey()).append("\":")
                .append(v instanceof String ? "\"" + v + "\"" : String.valueOf(v));
        }
        System.out.println(json.append('}'));
    }
}
