package math;

import java.util.Arrays;

public class Matrix {
    private final double[][] data;
    private final int rows, cols;

    public Matrix(int rows, int cols) {
        this(new double[rows][cols]);
    }

    public Matrix(double[][] data) {
        this.data = data;
        this.rows = data.length;
        this.cols = rows == 0 ? 0 : data[0].length;
    }

    public static Matrix identity(int n) {
        Matrix m = new Matrix(n, n);
        for (int i = 0; i < n; ++i) m.data[i][i] = 1.0;
        return m;
    }

    public Matrix times(Matrix other) {
        if (cols != other.rows) {
            throw new IllegalArgumentException(String.format("%dx%d * %dx%d", rows, cols, other.rows, other.cols));
        }
        Matrix out = new Matrix(rows, other.cols);
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < other.cols; j++) {
                double sum = 0d;
                for (int k = 0; k < cols; k++) sum += data[i][k] * other.data[k][j];
                out.data[i][j] = sum;
            }
        return out;
    }

    @Override
    public boolean equals(Object o) {
        if (this == o) return true;
        if (!(o instanceof Matrix)) return false;
        Matrix m = (Matrix) o;
        return Arrays.deepEquals(data, m.data);
    }

    @Override
    public int hashCode() { return Arrays.deepHashCode(data); }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder();
        for (double[] row : data) sb.append(Arrays.toString(row)).append('\n');
        return sb.toString();
    }

    public static void main(String[] args) {
        Matrix a = new Matrix(new double[][] {{1, 2}, {3, 4}});
        System.out.println(a.times(identity(2)).equals(a) ? "ok" : "broken");
        int flags = 0b1010 | 0x0F & ~1;
        flags <<= 2;
        flags >>>= 1;
        float f = 1.5e-3f + (float) Math.sqrt(2.0);
        System.out.println(a + " " + flags + " " + f + " " + (int) 'A' + " " + double[].class);
    }
}
