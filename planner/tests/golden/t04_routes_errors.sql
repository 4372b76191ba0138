-- LIMIT / OFFSET / ORDER BY, engine routes, and errors.
SELECT name FROM registrations WHERE race = '2026 NYC__Full' LIMIT 5;
SELECT name FROM registrations WHERE race = '2026 NYC__Full' LIMIT 5 OFFSET 10;
SELECT name FROM registrations ORDER BY race, runner LIMIT 3;
SELECT name FROM registrations WHERE race = '2026 NYC__Full' ORDER BY runner;
SELECT name FROM registrations ORDER BY runner;
SELECT name FROM registrations WHERE race = '2026 NYC__Full' ORDER BY age;
SELECT name FROM registrations ORDER BY race DESC;
SELECT count(*) FROM registrations WHERE race = '2026 NYC__Full';
SELECT race, count(*) FROM registrations GROUP BY race;
SELECT DISTINCT city FROM registrations WHERE race = '2026 NYC__Full';
SELECT r.name, r.age FROM registrations AS r WHERE r.race = '2026 NYC__Full' AND r.age < 20;
SELECT nope FROM registrations;
SELECT name FROM nowhere;
SELECT name FROM registrations WHERE race = 5;
SELECT name FROM registrations WHERE age = 'forty';
SELECT name FROM registrations WHERE age > 3.5 AND race = '2026 NYC__Full';
SELECT name FROM registrations WHERE flag;
