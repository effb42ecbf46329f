class Point {
    int x;
    int y;

    Point(int x, int y) {
        this.x = x;
        this.y = y;
    }

    int dot(Point other) {
        return x * other.x + y * other.y;
    }
}
