-- Typed key columns (bigint, timestamptz, uuid): predicates on the typed
-- column become spans over the order-preserving stored key text, and the
-- spans show the typed value each bound encodes. Fixture: readings(device
-- bigint, ts timestamptz) for devices -2 ..= 2, hourly for 2026-01-01;
-- tickets(id uuid).
SELECT v FROM readings WHERE device = 1 AND ts = '2026-01-01 05:00:00+00';
SELECT v FROM readings WHERE device = -1;
SELECT v FROM readings WHERE device = -1 AND ts >= '2026-01-01 20:00+00';
SELECT v FROM readings WHERE device >= -1 AND device < 1;
SELECT v FROM readings WHERE device > 1.5;
SELECT v FROM readings WHERE device = 1.5;
SELECT v FROM readings WHERE device IN (2, -2, 2.5);
SELECT v FROM readings WHERE device NOT IN (0, 1);
SELECT v FROM readings WHERE device BETWEEN -2 AND 0 AND ts < '2026-01-01 02:00+00';
SELECT v FROM readings WHERE device NOT BETWEEN -1 AND 1;
SELECT v FROM readings WHERE (device, ts) > (1, '2026-01-01 22:00+00');
SELECT v FROM readings WHERE (device, ts) IN ((0, '2026-01-01 00:00+00'), (-2, '2026-01-01 23:00+00'));
SELECT v FROM readings WHERE device = 9223372036854775807;
SELECT v FROM readings WHERE device < -9223372036854775808;
SELECT v FROM readings WHERE device = 1 OR v > 150;
SELECT v FROM readings WHERE device = $1 AND ts = $2;
SELECT device, ts FROM readings WHERE device + 0 = 1;
SELECT n FROM tickets WHERE id = '11111111-1111-1111-1111-111111111111';
SELECT n FROM tickets WHERE id > '88888888-8888-8888-8888-888888888888';
SELECT n FROM tickets WHERE id IN ('00000000-0000-0000-0000-000000000000', '22222222-2222-2222-2222-222222222222');
SELECT n FROM tickets WHERE id = 'not a uuid';
SELECT n FROM tickets WHERE id::text LIKE '1%';
