BEGIN TRANSACTION;
UPDATE products SET stock = stock - 1 WHERE sku = 'A-1' AND stock > 0;
UPDATE OR IGNORE customers SET credit = credit + 5.0, name = upper(name) WHERE id IN (1, 2);
UPDATE order_items SET unit_price = p.price FROM products AS p WHERE order_items.sku = p.sku;
INSERT INTO products (sku, title, price) VALUES ('D-4', 'Thing', 3.0)
    ON CONFLICT (sku) DO UPDATE SET price = excluded.price WHERE excluded.price > products.price;
INSERT OR REPLACE INTO customers (id, email, name) VALUES (3, 'grace@example.com', 'Grace Hopper');
REPLACE INTO products (sku, title, price, stock) SELECT 'E-5', 'Copy', price, stock FROM products WHERE sku = 'A-1';
INSERT INTO orders (customer_id, placed_at) VALUES (1, '2024-02-01') RETURNING id, status;
DELETE FROM order_items WHERE order_id NOT IN (SELECT id FROM orders);
DELETE FROM orders WHERE status = 'cancelled' RETURNING *;
SAVEPOINT before_cleanup;
DELETE FROM products WHERE stock = 0 AND sku NOT IN (SELECT DISTINCT sku FROM order_items);
ROLLBACK TO SAVEPOINT before_cleanup;
RELEASE before_cleanup;
COMMIT;
