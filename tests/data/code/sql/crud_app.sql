CREATE TABLE "todo items" (
  "id" INTEGER NOT NULL PRIMARY KEY,
  "title" TEXT NOT NULL,
  "done" BOOLEAN NOT NULL DEFAULT FALSE,
  "due" DATE,
  `priority` INT DEFAULT -1
);
INSERT INTO "todo items" ("title", "due") VALUES ('write tests', '2024-03-01');
INSERT INTO "todo items" (title) SELECT 'review ' || title FROM "todo items" WHERE NOT done;
UPDATE "todo items" SET done = TRUE, due = NULL WHERE id = 1;
SELECT id, title FROM "todo items" WHERE done = 0 AND (due IS NULL OR due < date('now')) ORDER BY due NULLS FIRST;
SELECT count(*) AS total, total(done) AS finished FROM "todo items";
DELETE FROM "todo items" WHERE done AND due < '2024-01-01';
CREATE TABLE tags (name TEXT PRIMARY KEY) STRICT;
CREATE TABLE copy AS SELECT * FROM "todo items" WHERE 0;
INSERT INTO tags DEFAULT VALUES;
SELECT 1 WHERE 1 = 1;
