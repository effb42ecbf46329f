-- Schema and seed data for a small shop.
PRAGMA foreign_keys = ON;

CREATE TABLE IF NOT EXISTS customers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    email TEXT NOT NULL UNIQUE COLLATE NOCASE,
    name VARCHAR(120) NOT NULL,
    created_at TEXT DEFAULT CURRENT_TIMESTAMP,
    credit REAL DEFAULT 0.0 CHECK (credit >= 0)
);

CREATE TABLE products (
    sku TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    price NUMERIC(10, 2) NOT NULL,
    stock INTEGER NOT NULL DEFAULT 0,
    tags TEXT
) WITHOUT ROWID;

CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
    placed_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'new' CHECK (status IN ('new', 'paid', 'shipped', 'cancelled')),
    total REAL GENERATED ALWAYS AS (0) VIRTUAL
);

CREATE TABLE order_items (
    order_id INTEGER NOT NULL,
    sku TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    unit_price REAL NOT NULL,
    PRIMARY KEY (order_id, sku),
    FOREIGN KEY (order_id) REFERENCES orders (id) ON DELETE CASCADE ON UPDATE NO ACTION,
    CONSTRAINT fk_sku FOREIGN KEY (sku) REFERENCES products (sku) DEFERRABLE INITIALLY DEFERRED
);

CREATE INDEX idx_orders_customer ON orders (customer_id, placed_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_items ON order_items (order_id, sku) WHERE quantity > 0;

INSERT INTO customers (email, name) VALUES
    ('ada@example.com', 'Ada Lovelace'),
    ('alan@example.com', 'Alan Turing'),
    ('grace@example.com', 'Grace O''Hopper');

INSERT INTO products VALUES ('A-1', 'Widget', 9.99, 100, 'tools,metal'),
                            ('B-2', 'Gadget', 24.5, 20, NULL),
                            ('C-3', "Doohickey", 1e2, 0, '');

INSERT INTO orders (id, customer_id, placed_at, status) VALUES (1, 1, '2024-01-05', 'paid'), (2, 2, date('now'), 'new');
INSERT INTO order_items VALUES (1, 'A-1', 3, 9.99), (1, 'B-2', 1, 24.5), (2, 'A-1', 10, 9.5);
