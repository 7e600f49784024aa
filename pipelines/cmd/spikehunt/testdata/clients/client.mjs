// @clickhouse/client (Node.js) against serve-clickhouse, at the client's
// defaults. Run by serve_clients_test.go with SH_HOST, SH_PORT, SH_USER,
// SH_PASSWORD, SH_DATABASE and SH_TABLE set (NODE_PATH names the installed
// client); prints one JSON object per step.
import { createRequire } from 'node:module'
import path from 'node:path'

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'))
const { createClient } = require('@clickhouse/client')

const env = process.env
const table = env.SH_TABLE
const client = (extra = {}) =>
  createClient({
    url: `http://${env.SH_HOST}:${env.SH_PORT}`,
    username: env.SH_USER,
    password: env.SH_PASSWORD,
    database: env.SH_DATABASE,
    ...extra,
  })
const say = (step, fields) => console.log(JSON.stringify({ step, ...fields }))
const codeOf = async (fn) => {
  try {
    await fn()
  } catch (e) {
    return { code: String(e.code ?? ''), message: String(e.message).slice(0, 300) }
  }
  return { code: 'none' }
}
const all = async (c, query, query_params) =>
  (await c.query({ query, format: 'JSONCompactEachRow', query_params })).json()

// Defaults: no compression either way, JSON formats.
const c = client()
say('query', { rows: (await all(c, 'SELECT number AS n, toString(number) AS s FROM system.numbers LIMIT 3')).map((r) => r.map(String)) })

await c.command({ query: `CREATE TABLE ${table} (host String, v UInt32) ENGINE = MergeTree ORDER BY host` })
await c.insert({ table, values: Array.from({ length: 1000 }, (_, i) => ({ host: `h${i % 10}`, v: i })), format: 'JSONEachRow' })
let [r] = await all(c, `SELECT count(), sum(v) FROM ${table}`)
say('insert', { count: String(r[0]), sum: String(r[1]) })

;[r] = await all(c, `SELECT count(), sum(v) FROM ${table} WHERE host = {h:String} AND v >= {min:UInt32}`, { h: 'h3', min: 500 })
say('params', { count: String(r[0]), sum: String(r[1]) })
const tricky = 'it\'s a "quote"\\ and\ttab; DROP TABLE x'
;[r] = await all(c, 'SELECT {s:String} AS s, length({s:String}) AS n', { s: tricky })
say('params_quote', { echoed: r[0] === tricky, length: String(r[1]) })

// gzip both ways, the codec this Node.js has (zstd needs Node.js 22.15).
const cc = client({ compression: { request: true, response: true } })
await cc.insert({ table, values: Array.from({ length: 1000 }, (_, i) => ({ host: `gzip-${i % 10}`, v: i })), format: 'JSONEachRow' })
let n = 0
let sum = 0n
const rs = await cc.query({ query: 'SELECT number FROM system.numbers LIMIT 200000', format: 'JSONCompactEachRow' })
for await (const rows of rs.stream()) {
  for (const row of rows) {
    n++
    sum += BigInt(row.json()[0])
  }
}
;[r] = await all(cc, `SELECT count() FROM ${table} WHERE startsWith(host, 'gzip-')`)
say('compressed_gzip', { rows: String(n), sum: String(sum), inserted: String(r[0]) })

say('error_unknown_table', await codeOf(() => all(c, 'SELECT * FROM no_such_table')))
say('error_bad_param', await codeOf(() => all(c, 'SELECT {n:UInt32}', { n: 'abc' })))
// serve-clickhouse has no sessions: a statement that needs one is NOT_IMPLEMENTED.
say('error_not_implemented', await codeOf(() => c.command({ query: 'CREATE TEMPORARY TABLE tmp (x UInt8)' })))
await c.close()
await cc.close()
