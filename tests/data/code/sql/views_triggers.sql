CREATE TABLE audit_log (
  id integer primary key,
  tbl text not null,
  action text not null,
  at text default (strftime('%Y-%m-%dT%H:%M:%S', 'now'))
);
create table accounts (id integer primary key, owner text, balance integer not null default 0);
create view if not exists rich_accounts as
  select owner, balance from accounts where balance > 1000;
create temp view v2 (o, b) as select owner, balance from accounts;
create trigger accounts_audit after update of balance on accounts
for each row when new.balance < 0
begin
  insert into audit_log (tbl, action) values ('accounts', 'negative balance for ' || new.owner);
  update accounts set balance = 0 where id = new.id;
end;
create trigger no_delete before delete on accounts
begin
  select raise(abort, 'deleting accounts is not allowed');
end;
alter table accounts add column opened text;
alter table accounts rename column owner to holder;
alter table audit_log rename to audit;
drop view if exists v2;
drop index if exists no_such_index;
select holder, balance, iif(balance > 0, 'credit', 'debit') as kind from accounts order by balance desc limit 5;
select typeof(1), typeof('a'), typeof(null), 5 % 3, 1 << 4, ~7, abs(-3) as "absolute value", [holder] from accounts;
values (1, 'a'), (2, 'b');
explain query plan select * from accounts where id = 1;
analyze;
vacuum;
