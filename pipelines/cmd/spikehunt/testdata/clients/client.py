"""clickhouse-connect against serve-clickhouse, at the client's defaults.

Run by conformance_test.go with SH_HOST, SH_PORT, SH_USER, SH_PASSWORD,
SH_DATABASE and SH_TABLE set; prints one JSON object per step.
"""
import json
import os

import clickhouse_connect
from clickhouse_connect.driver.exceptions import DatabaseError

env = os.environ
table = env["SH_TABLE"]


def client(**kw):
    return clickhouse_connect.get_client(
        host=env["SH_HOST"], port=int(env["SH_PORT"]), username=env["SH_USER"],
        password=env["SH_PASSWORD"], database=env["SH_DATABASE"], **kw)


def say(step, **kw):
    print(json.dumps({"step": step, **kw}), flush=True)


def code_of(fn):
    try:
        fn()
    except DatabaseError as e:
        # The client puts the server's message, "Code: 60. DB::Exception: …", in str(e).
        text = str(e)
        code = text.split("Code: ", 1)[1].split(".", 1)[0] if "Code: " in text else ""
        return {"code": code, "message": text[:300]}
    return {"code": "none"}


c = client()  # defaults: compress=True (lz4 request bodies, gzip/lz4/zstd responses)
rows = c.query("SELECT number AS n, toString(number) AS s FROM system.numbers LIMIT 3").result_rows
say("query", rows=[[str(v) for v in r] for r in rows])

c.command(f"CREATE TABLE {table} (host String, v UInt32) ENGINE = MergeTree ORDER BY host")
c.insert(table, [[f"h{i % 10}", i] for i in range(1000)], column_names=["host", "v"])
r = c.query(f"SELECT count(), sum(v) FROM {table}").result_rows[0]
say("insert", count=str(r[0]), sum=str(r[1]))

r = c.query(f"SELECT count(), sum(v) FROM {table} WHERE host = {{h:String}} AND v >= {{min:UInt32}}",
            parameters={"h": "h3", "min": 500}).result_rows[0]
say("params", count=str(r[0]), sum=str(r[1]))
tricky = "it's a \"quote\"\\ and\ttab; DROP TABLE x"
r = c.query("SELECT {s:String} AS s, length({s:String}) AS n", parameters={"s": tricky}).result_rows[0]
say("params_quote", echoed=r[0] == tricky, length=str(r[1]))

# Long queries, or this option, send the query and its parameters as a
# multipart form.
r = client(form_encode_query_params=True).query(
    f"SELECT count(), sum(v) FROM {table} WHERE host = {{h:String}} AND v >= {{min:UInt32}}",
    parameters={"h": "h3", "min": 500}).result_rows[0]
say("params_form", count=str(r[0]), sum=str(r[1]))

# The defaults compress both ways; zstd is the other method the client offers.
for method in ["lz4", "zstd"]:
    cc = client(compress=method)
    cc.insert(table, [[f"{method}-{i % 10}", i] for i in range(1000)], column_names=["host", "v"])
    total = 0
    n = 0
    for row in cc.query("SELECT number FROM system.numbers LIMIT 200000").result_rows:
        total += row[0]
        n += 1
    r = cc.query(f"SELECT count() FROM {table} WHERE startsWith(host, {{m:String}})", parameters={"m": method + "-"}).result_rows[0]
    say("compressed_" + method, rows=str(n), sum=str(total), inserted=str(r[0]))

say("error_unknown_table", **code_of(lambda: c.query("SELECT * FROM no_such_table")))
say("error_bad_param", **code_of(lambda: c.query("SELECT {n:UInt32}", parameters={"n": "abc"})))
# serve-clickhouse has no sessions: a statement that needs one is NOT_IMPLEMENTED.
say("error_not_implemented", **code_of(lambda: c.command("CREATE TEMPORARY TABLE tmp (x UInt8)")))
