package events;

import java.lang.annotation.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.TYPE})
@interface Subscribe {
    String topic() default "";
    int priority() default 0;
    String[] tags() default {};
}

public class EventBus implements AutoCloseable {
    public enum Level {
        LOW(1), NORMAL(5), HIGH(10) {
            @Override boolean urgent() { return true; }
        };

        private final int weight;
        Level(int weight) { this.weight = weight; }
        boolean urgent() { return false; }
        int weight() { return weight; }
    }

    private final ConcurrentMap<String, CopyOnWriteArrayList<Consumer<Object>>> handlers = new ConcurrentHashMap<>();
    private final ExecutorService pool = Executors.newFixedThreadPool(2);
    private final AtomicInteger delivered = new AtomicInteger();
    private volatile boolean closed;

    @SuppressWarnings("unchecked")
    public <E> void subscribe(String topic, Consumer<? super E> handler) {
        handlers.computeIfAbsent(topic, k -> new CopyOnWriteArrayList<>()).add((Consumer<Object>) handler);
    }

    public Future<Integer> publish(String topic, Object event) {
        if (closed) throw new IllegalStateException("closed");
        return pool.submit(() -> {
            int n = 0;
            for (Consumer<Object> h : handlers.getOrDefault(topic, new CopyOnWriteArrayList<>())) {
                try {
                    h.accept(event);
                    n++;
                } catch (RuntimeException | Error e) {
                    System.err.println("handler failed: " + e.getMessage());
                } finally {
                    delivered.incrementAndGet();
                }
            }
            return n;
        });
    }

    @Override
    public synchronized void close() throws InterruptedException {
        closed = true;
        pool.shutdown();
        if (!pool.awaitTermination(1, TimeUnit.SECONDS)) pool.shutdownNow();
    }

    public static void main(String[] args) throws Exception {
        try (EventBus bus = new EventBus()) {
            bus.<String>subscribe("greet", s -> System.out.println("hello " + s));
            Runnable r = () -> {};
            r.run();
            Object lock = new Object();
            synchronized (lock) {
                System.out.println(bus.publish("greet", "world").get() + " " + Level.HIGH.urgent());
            }
            label:
            for (int i = 0, j = 10; i < j; i++, j--) {
                if (i == 3) continue label;
                assert i < j : "ordering";
            }
            Thread t = new Thread() {
                @Override public void run() { System.out.println(EventBus.class.getSimpleName()); }
            };
            t.start();
            t.join();
        }
    }
}
