-- More key predicate forms: literals on the left, row values <, <=, <>,
-- LIKE with escapes and ESCAPE clauses in the middle of a pattern, IN and
-- OR with duplicates, reversed and NULL bounds, the empty key, NULL tests,
-- normalization, parameters in every position, and the one-key table.
-- (Fixture: partition i of registrations holds runners r = 0 .. 10(i+1)-1
-- with RowKeys 'BIB:<r>__<name>' and 'AGE:<age>__<r>__<name>'.)
SELECT name FROM registrations WHERE '2026 NYC__Full' = race AND 'AGE:030' <= runner;
SELECT name FROM registrations WHERE '2026 NYC' < race;
SELECT name FROM registrations WHERE (race, runner) <= ('2026 Berlin__Full', 'AGE:030');
SELECT name FROM registrations WHERE (race, runner) < ('2026 NYC__Full', 'AGE:');
SELECT name FROM registrations WHERE (race, runner) >= ('2026 NYC__Half', 'BIB:00100');
SELECT name FROM registrations WHERE (race, runner) <> ('2026 NYC__Full', 'BIB:00003__Hiro');
SELECT name FROM registrations WHERE race LIKE '2026 NYC\_\_%ll';
SELECT name FROM registrations WHERE race LIKE '2026 Berlin#_#_F%' ESCAPE '#';
SELECT name FROM registrations WHERE race LIKE '2026 NYC#_%l' ESCAPE '#';
SELECT name FROM registrations WHERE race LIKE '2026 NYC__Full' ESCAPE '';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner LIKE 'AGE:0_0%';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner LIKE 'BIB:00003__Hiro';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner LIKE 'BIB:00003\_\_Hiro';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner NOT LIKE 'BIB:%';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner ILIKE 'bib:0000%';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner IN ('BIB:00003__Hiro', 'BIB:00003__Hiro', 'BIB:00004__Ada');
SELECT name FROM registrations WHERE (race = '2026 NYC__Full' AND runner = 'BIB:00003__Hiro') OR (race = '2026 NYC__Full' AND runner = 'BIB:00003__Hiro');
SELECT name FROM registrations WHERE race IN ('2026 NYC__Full', '2026 NYC__Half') AND runner = 'BIB:00003__Hiro';
SELECT name FROM registrations WHERE race BETWEEN '2026 NYC__Full' AND '2026 Berlin__Full';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner NOT BETWEEN 'AGE:' AND 'AGE:~';
SELECT name FROM registrations WHERE race < '';
SELECT name FROM registrations WHERE race <= '';
SELECT name FROM registrations WHERE race > '';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND runner >= '';
SELECT name FROM registrations WHERE runner IS NULL;
SELECT name FROM registrations WHERE runner IS NOT NULL AND race = '2026 Boston__Full';
SELECT name FROM registrations WHERE city IS NOT NULL AND race = '2026 Berlin__Full';
SELECT name FROM registrations WHERE race = '2026 Berlin__Full' AND NOT (city IS NULL);
SELECT name FROM registrations WHERE race = '2026 Berlin__Full' AND city <> 'Paris';
SELECT name FROM registrations WHERE race = '2026 Berlin__Full' AND NOT (age BETWEEN 20 AND 30);
SELECT name FROM registrations WHERE age IS NULL;
SELECT name FROM registrations WHERE race = NULL;
SELECT name FROM registrations WHERE race IN (NULL);
SELECT name FROM registrations WHERE race LIKE NULL;
SELECT name FROM registrations WHERE race BETWEEN '2026 NYC' AND NULL;
SELECT name FROM registrations WHERE race NOT BETWEEN '2026 NYC' AND NULL;
SELECT name FROM registrations WHERE NOT (race = '2026 NYC__Full' OR race = '2026 NYC__Half');
SELECT name FROM registrations WHERE NOT (NOT (race = '2026 NYC__Full' AND runner >= 'BIB:'));
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND (runner = 'BIB:00003__Hiro' OR age > 70);
SELECT name FROM registrations WHERE (race = '2026 NYC__Full' OR race = '2026 Boston__Full') AND age < 20;
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND race = '2026 NYC__Full' AND runner = 'BIB:00003__Hiro';
SELECT name FROM registrations WHERE race = $1 AND runner LIKE 'BIB:%';
SELECT name FROM registrations WHERE race IN ($1, '2026 Berlin__Full');
SELECT name FROM registrations WHERE race = $1 AND runner BETWEEN $2 AND $3;
SELECT name FROM registrations WHERE (race, runner) >= ($1, $2);
SELECT name FROM registrations WHERE race = $1 AND age BETWEEN $2 AND 50;
SELECT name FROM registrations WHERE race LIKE $1;
SELECT title FROM events WHERE id = 'nope';
SELECT title FROM events WHERE id IN ('ev003', 'ev003', 'ev001');
SELECT title FROM events WHERE id LIKE 'ev00%';
SELECT title FROM events WHERE id <> 'ev003';
SELECT title FROM events WHERE id = 'ev003' OR id = 'ev004';
SELECT title FROM events WHERE id = 'ev003' AND capacity > 100;
SELECT title FROM events WHERE id = 'ev001' AND id = 'ev002';
SELECT title FROM events WHERE id BETWEEN 'ev005' AND 'ev007' ORDER BY id;
SELECT * FROM events WHERE id IS NULL;
-- A row IN over both keys: point lookups; NOT IN: the spans around them.
SELECT name FROM registrations WHERE (race, runner) IN (('2026 NYC__Full', 'BIB:00003__Hiro'), ('2026 Berlin__Full', 'BIB:00001__Ada'));
SELECT name FROM registrations WHERE (race, runner) NOT IN (('2026 NYC__Full', 'BIB:00003__Hiro'), ('2026 Berlin__Full', NULL));
