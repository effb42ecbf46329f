SELECT c.name, COUNT(o.id) AS order_count, SUM(oi.quantity * oi.unit_price) AS revenue
FROM customers AS c
LEFT JOIN orders o ON o.customer_id = c.id
LEFT OUTER JOIN order_items oi ON oi.order_id = o.id
WHERE c.email LIKE '%@example.com' AND o.status <> 'cancelled'
GROUP BY c.id
HAVING revenue > 10
ORDER BY revenue DESC NULLS LAST, c.name COLLATE NOCASE ASC
LIMIT 10 OFFSET 0;

SELECT * FROM products WHERE sku IN (SELECT sku FROM order_items WHERE quantity >= 3);

SELECT p.title,
       CASE WHEN p.stock = 0 THEN 'sold out'
            WHEN p.stock < 10 THEN 'low'
            ELSE 'ok' END AS availability,
       CAST(p.price * 100 AS INTEGER) AS cents
FROM products p
WHERE NOT EXISTS (SELECT 1 FROM order_items i WHERE i.sku = p.sku)
   OR p.price BETWEEN 5 AND 20;

WITH RECURSIVE counter(n) AS (
    SELECT 1
    UNION ALL
    SELECT n + 1 FROM counter WHERE n < 10
)
SELECT n, n * n AS square FROM counter;

WITH totals AS (
    SELECT order_id, SUM(quantity * unit_price) AS total FROM order_items GROUP BY order_id
)
SELECT o.id, t.total, rank() OVER (ORDER BY t.total DESC) AS rnk,
       sum(t.total) OVER (PARTITION BY o.customer_id ORDER BY o.placed_at ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running
FROM orders o JOIN totals t USING (id)
WHERE t.total IS NOT NULL;

SELECT customer_id, placed_at FROM orders
EXCEPT
SELECT customer_id, placed_at FROM orders WHERE status = 'cancelled'
ORDER BY 1;

SELECT a.sku, b.sku FROM products a CROSS JOIN products b WHERE a.sku < b.sku;

SELECT count(DISTINCT customer_id), max(placed_at), group_concat(status, ';') FILTER (WHERE status != 'new')
FROM orders;

SELECT id FROM orders WHERE placed_at >= datetime('now', '-7 days') AND status NOT IN ('cancelled');

SELECT x.* FROM (SELECT sku, price FROM products ORDER BY price LIMIT 2) AS x;

SELECT coalesce(tags, '-') || ' (' || sku || ')' AS label, length(title) FROM products WHERE tags IS NULL OR tags GLOB '*metal*';

SELECT :name, ?1, @v, $x, X'DEADBEEF', -1.5e-3, 0x1F, .5;
