-- One query of each class on the registrations table.
SELECT * FROM registrations WHERE race = '2026 NYC__Full' AND runner = 'BIB:00003__Hiro';
SELECT name, age FROM registrations WHERE race = '2026 NYC__Full' AND runner >= 'AGE:030' AND runner < 'AGE:040';
SELECT name FROM registrations WHERE race = '2026 NYC__Full';
SELECT name FROM registrations WHERE race LIKE '2026 NYC%';
SELECT name FROM registrations WHERE age > 70;
SELECT * FROM registrations;
SELECT * FROM registrations WHERE race = 'a' AND race = 'b';
SELECT title FROM events WHERE id = 'ev003';
