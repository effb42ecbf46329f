package shapes;

import java.util.List;

public sealed interface Shapes permits Shapes.Circle, Shapes.Square, Shapes.Rectangle {
    double area();

    record Circle(double r) implements Shapes {
        public double area() { return Math.PI * r * r; }
    }

    record Square(double side) implements Shapes {
        public double area() { return side * side; }
    }

    non-sealed class Rectangle implements Shapes {
        protected final double w, h;
        Rectangle(double w, double h) { this.w = w; this.h = h; }
        @Override public double area() { return w * h; }
    }

    static String describe(Object o) {
        return switch (o) {
            case null -> "null";
            case Circle c when c.r() > 10 -> "big circle";
            case Circle c -> "circle";
            case Square(double s) -> "square of " + s;
            case Rectangle r -> "rectangle " + r.w + "x" + r.h;
            case String s -> {
                String t = s.strip();
                yield t.isEmpty() ? "blank" : t;
            }
            default -> o.toString();
        };
    }

    static int legacy(int day) {
        int n;
        switch (day) {
            case 1:
            case 7:
                n = 0;
                break;
            default:
                n = day * 2;
        }
        return n;
    }

    static void main(String... args) {
        List<Shapes> all = List.of(new Circle(1), new Square(2), new Rectangle(2, 3));
        double total = 0;
        for (Shapes s : all) {
            if (s instanceof Circle c && c.r() > 0) total += c.area();
            else total += s.area();
        }
        String text = """
            Total area: %.2f
              "quoted" and \"escaped\"
            """.formatted(total);
        System.out.print(text + describe(all.get(0)) + legacy(3));
    }
}
