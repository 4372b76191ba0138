-- Parameters ($1 = '2026 NYC__Full', $2 = 'AGE:030', $3 = 'AGE:040', ints 40),
-- residual filters, and what cannot be pushed.
SELECT name FROM registrations WHERE race = $1;
SELECT name FROM registrations WHERE race = $1 AND runner >= $2 AND runner < $3;
SELECT name FROM registrations WHERE race = $1 AND age > $2;
SELECT name FROM registrations WHERE race = $1 LIMIT $2;
SELECT name, age FROM registrations WHERE race = '2026 NYC__Full' AND age > 40 AND city = 'Paris';
SELECT name FROM registrations WHERE age >= 30 AND age < 40;
SELECT name FROM registrations WHERE runner = 'BIB:00001__Dmitri';
SELECT name FROM registrations WHERE runner LIKE 'AGE:03%';
SELECT name FROM registrations WHERE lower(race) = '2026 nyc__full';
SELECT name FROM registrations WHERE race || 'x' = '2026 NYC__Fullx';
SELECT name FROM registrations WHERE CAST(age AS TEXT) = '40';
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND age + 1 > 40;
SELECT name FROM registrations WHERE race = '2026 NYC__Full' AND name = city;
SELECT name FROM registrations WHERE registered >= '2026-01-10' AND race = '2026 Berlin__Full';
SELECT name FROM registrations WHERE etag = 'W/"datetime''2026-01-01T00:00:00.000000Z''"' AND race = '2026 NYC__Full';
SELECT title FROM events WHERE id = 'ev003';
SELECT title FROM events WHERE id IN ('ev001', 'ev002');
SELECT title FROM events WHERE id >= 'ev010';
SELECT title FROM events WHERE capacity > 1000;
