/* Monthly report queries */
CREATE TABLE events (
    user_id INTEGER,
    kind TEXT,
    happened_at TEXT,
    payload TEXT
);

CREATE TABLE users (id INTEGER PRIMARY KEY, country TEXT, signup TEXT);

SELECT strftime('%Y-%m', happened_at) AS month,
       kind,
       COUNT(*) AS n,
       COUNT(DISTINCT user_id) AS users,
       ROUND(AVG(LENGTH(payload)), 2) AS avg_payload
FROM events
WHERE happened_at >= '2024-01-01'
GROUP BY month, kind
ORDER BY month, n DESC;

SELECT u.country,
       SUM(CASE e.kind WHEN 'purchase' THEN 1 ELSE 0 END) AS purchases,
       SUM(e.kind = 'view') AS views
FROM users u
INNER JOIN events e ON e.user_id = u.id
GROUP BY u.country
HAVING purchases > 0;

SELECT user_id, happened_at,
       LAG(happened_at) OVER w AS previous,
       ROW_NUMBER() OVER w AS seq
FROM events
WINDOW w AS (PARTITION BY user_id ORDER BY happened_at);

SELECT json_extract(payload, '$.amount') AS amount FROM events WHERE json_valid(payload) AND kind = 'purchase';

SELECT id FROM users WHERE signup IS NOT NULL
INTERSECT
SELECT user_id FROM events;

SELECT *
FROM users u
WHERE (SELECT COUNT(*) FROM events e WHERE e.user_id = u.id) > 3
  AND u.country NOT LIKE 'X%' ESCAPE '\';

SELECT a.user_id, b.user_id AS other
FROM events a
JOIN events b ON a.payload = b.payload AND a.user_id <> b.user_id
NATURAL JOIN users;
