// node-postgres against tablegate: create, insert, parameters, a cursor
// over 5,000 rows, and information_schema.columns. Usage: node_client.js PORT
const { Client } = require('pg');
const assert = require('assert');

(async () => {
  const c = new Client({ host: '127.0.0.1', port: Number(process.argv[2]), user: 'tablegate', database: 'tablegate' });
  await c.connect();
  await c.query('DROP TABLE IF EXISTS js_items');
  await c.query('CREATE TABLE js_items (pk text, rk text, n int, label text, PRIMARY KEY (pk, rk))');
  // 5,000 rows as multi-row INSERTs of 100, each one PartitionKey: one EGT each.
  for (let b = 0; b < 50; b++) {
    const values = [];
    const params = [];
    for (let j = 0; j < 100; j++) {
      const i = b * 100 + j;
      params.push(`p${b % 5}`, `r${String(i).padStart(5, '0')}`, i, `item ${i}`);
      const k = j * 4;
      values.push(`($${k + 1}, $${k + 2}, $${k + 3}, $${k + 4})`);
    }
    const r = await c.query(`INSERT INTO js_items VALUES ${values.join(', ')}`, params);
    assert.strictEqual(r.rowCount, 100);
  }
  const one = await c.query('SELECT n, label FROM js_items WHERE pk = $1 AND rk = $2', ['p0', 'r00042']);
  assert.deepStrictEqual(one.rows, [{ n: 42, label: 'item 42' }]);

  await c.query('BEGIN');
  await c.query('DECLARE pager CURSOR FOR SELECT pk, rk, n FROM js_items');
  let seen = 0;
  for (;;) {
    const page = await c.query('FETCH 600 FROM pager');
    if (page.rows.length === 0) break;
    seen += page.rows.length;
  }
  await c.query('CLOSE pager');
  await c.query('COMMIT');
  assert.strictEqual(seen, 5000);

  const cols = await c.query(
    "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
    ['js_items']);
  assert.deepStrictEqual(cols.rows.slice(0, 3), [
    { column_name: 'pk', data_type: 'text' },
    { column_name: 'rk', data_type: 'text' },
    { column_name: 'n', data_type: 'integer' },
  ]);
  await c.end();
  console.log('node-postgres ok');
})().catch((e) => { console.error(e); process.exit(1); });
