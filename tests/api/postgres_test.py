#!/usr/bin/env python3
"""Keys and usage in PostgreSQL (issue 29), on a private cluster started here.

1. `tachyon keys` and `tachyon usage` work against `--db postgresql://...` as against SQLite:
   create (a duplicate name refused), list, update, revoke, usage by key and by day; the schema
   comes from migrations recorded in schema_migrations, applied once.
2. Two replicas on that database behind a router: every answered request has exactly one ledger
   row; a key revoked with `tachyon keys` is refused on both within a second.
3. PostgreSQL restarted under load (an immediate stop, as a crash, then a start): requests keep
   being answered (keys seen recently stay valid), and no ledger row is lost: rows finished while
   it was down are written once it is back.

    .venv/bin/python tests/api/postgres_test.py --tachyon build/tachyon
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

try:
    import httpx
except ImportError:  # the openai client in .venv ships its HTTP library as httpx2
    import httpx2 as httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checks import check, exit_status, info, section  # noqa: E402
from gateway_util import KeysCli, bearer  # noqa: E402
from postgres_fixture import PostgresServer  # noqa: E402
from server_fixture import TachyonRouter, TachyonServer  # noqa: E402

REPLICA_ARGS = ["-t", "1", "-c", "2048", "--kv-cache-mem", "128MiB"]


def completion(base: str, key: str, model: str, request_id: str) -> int:
    try:
        return httpx.post(base + "/v1/completions", timeout=60,
                          headers={**bearer(key), "X-Request-Id": request_id},
                          json={"model": model, "prompt": "Hi", "max_tokens": 2,
                                "temperature": 0}).status_code
    except httpx.HTTPError:
        return 0


def rows_for(pg: PostgresServer, prefix: str) -> dict[str, int]:
    """Ledger rows per client request id (the ledger appends '#suffix' to client ids)."""
    counts: dict[str, int] = {}
    for (request_id,) in pg.query(
            f"SELECT split_part(request_id, '#', 1) FROM usage WHERE request_id LIKE '{prefix}%'"):
        counts[request_id] = counts.get(request_id, 0) + 1
    return counts


def test_cli(tachyon: str, pg: PostgresServer) -> None:
    keys = KeysCli(tachyon, pg.url)
    created = keys.create("cli-user", rpm=60, tpm=0, concurrency=0)
    check("keys create on PostgreSQL prints the key once",
          created["key"].startswith("sk-tachyon-") and created["name"] == "cli-user", created)
    duplicate = keys.run("keys", "create", "--name", "cli-user", "--db", pg.url)
    check("a duplicate live name is refused", duplicate.returncode != 0 and
          "already exists" in duplicate.stderr, duplicate.stderr)
    keys.update("cli-user", rpm=90)
    listed = {k["name"]: k for k in keys.list()}
    check("keys list / update on PostgreSQL", listed.get("cli-user", {}).get("rpm") == 90, listed)
    keys.revoke("cli-user")
    listed = {k["name"]: k for k in keys.list()}
    check("keys revoke on PostgreSQL", listed["cli-user"].get("revoked") not in (None, False, ""),
          listed["cli-user"])
    again = keys.create("cli-user", rpm=0, tpm=0, concurrency=0)
    check("a revoked key's name can be used again", again["id"] != created["id"], again)
    migrations = pg.query("SELECT component, version FROM schema_migrations ORDER BY component")
    check("the schema came from recorded migrations",
          ["api_keys", "1"] in migrations, migrations)


def test_replicas(tachyon: str, pg: PostgresServer, model_path: str | None) -> None:
    keys = KeysCli(tachyon, pg.url)
    key = keys.create("pg-user", rpm=0, tpm=0, concurrency=0)["key"]
    auth = ["--auth", "db", "--db", pg.url]
    replicas = [TachyonServer(tachyon, model_path, REPLICA_ARGS + auth) for _ in range(2)]
    try:
        for replica in replicas:
            replica.start()
        model = replicas[0].get_json("/health")[1]["models"][0]["id"]
        with TachyonRouter(tachyon, [r.url for r in replicas],
                           ["--routing", "round-robin"]) as router:
            statuses = [completion(router.url, key, model, f"pg-basic-{i}") for i in range(6)]
            check("requests through two replicas on one PostgreSQL succeed",
                  statuses == [200] * 6, statuses)
            rows = rows_for(pg, "pg-basic-")
            check("each answered request has exactly one ledger row in PostgreSQL",
                  len(rows) == 6 and set(rows.values()) == {1}, rows)
            usage = keys.usage("--by", "key")
            mine = [u for u in usage if u.get("key") == "pg-user" or u.get("group") == "pg-user"]
            check("tachyon usage reads the PostgreSQL ledger",
                  mine and mine[0].get("requests") == 6, usage)
            by_day = keys.usage("--by", "day")
            check("tachyon usage --by day on PostgreSQL", len(by_day) >= 1 and
                  len(str(by_day[0].get("day", by_day[0].get("group", "")))) == 10, by_day)
            migrations = pg.query("SELECT count(*) FROM schema_migrations")
            check("starting more servers applied no migration twice", migrations == [["2"]],
                  migrations)

            victim = keys.create("pg-victim", rpm=0, tpm=0, concurrency=0)["key"]
            ok = [completion(router.url, victim, model, f"pg-victim-{i}") for i in range(2)]
            keys.revoke("pg-victim")
            time.sleep(1.05)
            after = [completion(router.url, victim, model, f"pg-victim-after-{i}")
                     for i in range(4)]
            check("a key revoked in PostgreSQL is refused on both replicas within a second",
                  ok == [200, 200] and after == [401] * 4, (ok, after))

            # PostgreSQL restarted under load.
            statuses: dict[str, int] = {}
            stop = threading.Event()

            def load() -> None:
                i = 0
                while not stop.is_set():
                    request_id = f"pg-load-{i}"
                    statuses[request_id] = completion(router.url, key, model, request_id)
                    i += 1
            thread = threading.Thread(target=load)
            thread.start()
            time.sleep(1.5)
            pg.restart()
            info("PostgreSQL restarted (immediate stop, then start) under load")
            time.sleep(1.5)
            stop.set()
            thread.join(timeout=120)
            for i in range(3):  # the next requests write what waited
                completion(router.url, key, model, f"pg-flush-{i}")
            answered = [rid for rid, status in statuses.items() if status == 200]
            refused = {rid: status for rid, status in statuses.items() if status != 200}
            rows = rows_for(pg, "pg-load-")
            info(f"{len(answered)} answered during the restart window, {len(refused)} not "
                 f"({sorted(set(refused.values()))})")
            check("requests kept being answered while PostgreSQL restarted",
                  len(answered) >= 5 and len(refused) <= 2, refused)
            check("no ledger row lost: every answered request has exactly one row",
                  all(rows.get(rid) == 1 for rid in answered), {rid: rows.get(rid)
                                                               for rid in answered
                                                               if rows.get(rid) != 1})
            check("no ledger row twice", all(count == 1 for count in rows.values()))
            check("the outage was seen: rows waited in memory while PostgreSQL was down",
                  any("keeping records until it is back" in r.stderr_text() for r in replicas))
    finally:
        for replica in replicas:
            replica.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tachyon", required=True)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    with PostgresServer() as pg:
        info(f"PostgreSQL at {pg.url}")
        section("keys and usage CLI", test_cli, args.tachyon, pg)
        section("replicas", test_replicas, args.tachyon, pg, args.model)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
