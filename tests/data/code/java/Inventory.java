package com.example.shop;

import java.util.*;
import java.util.function.Function;
import java.util.stream.Collectors;
import static java.util.Objects.requireNonNull;

/** A small inventory with generics, streams and records. */
public final class Inventory<T extends Comparable<T>> implements Iterable<Inventory.Item<T>> {
    public record Item<T>(T key, String name, int quantity) {
        public Item {
            if (quantity < 0) throw new IllegalArgumentException("negative quantity: " + quantity);
            requireNonNull(name);
        }
    }

    private final Map<T, Item<T>> items = new TreeMap<>();
    private static final int LIMIT = 1_000;

    public void add(T key, String name, int quantity) {
        items.merge(key, new Item<>(key, name, quantity),
                (a, b) -> new Item<>(a.key(), a.name(), a.quantity() + b.quantity()));
    }

    public Optional<Item<T>> find(T key) {
        return Optional.ofNullable(items.get(key));
    }

    public Map<Boolean, List<String>> partitionByStock() {
        return items.values().stream()
                .collect(Collectors.partitioningBy(i -> i.quantity() > 0,
                        Collectors.mapping(Item::name, Collectors.toList())));
    }

    public <R> List<R> map(Function<? super Item<T>, ? extends R> f) {
        List<R> out = new ArrayList<>(items.size());
        for (Item<T> item : items.values()) out.add(f.apply(item));
        return out;
    }

    @Override
    public Iterator<Item<T>> iterator() {
        return Collections.unmodifiableCollection(items.values()).iterator();
    }

    int total() {
        int sum = 0;
        for (var it = items.values().iterator(); it.hasNext(); ) {
            sum += it.next().quantity();
            if (sum >= LIMIT) break;
        }
        return sum;
    }

    public static void main(String[] args) {
        Inventory<String> inv = new Inventory<>();
        inv.add("a-1", "Widget", 3);
        inv.add("b-2", "Gadget", 0);
        inv.find("a-1").ifPresent(i -> System.out.println(i.name()));
        System.out.println(inv.partitionByStock() + " " + inv.total());
        int[][] grid = new int[3][];
        grid[0] = new int[] {1, 2, 3};
        long bits = 0xFFL >>> 2 >> 1 << 3;
        char c = '\n';
        System.out.printf("%d %s %c%n", bits, Arrays.toString(grid[0]), c);
    }
}
