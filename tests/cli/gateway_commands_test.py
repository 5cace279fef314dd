#!/usr/bin/env python3
"""`tachyon keys` and `tachyon usage` end to end: JSON output, what the database holds (only a
SHA-256 of each secret), and the exact one-line error for each mistake.
    .venv/bin/python tests/cli/gateway_commands_test.py --tachyon build/tachyon
"""
import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/api"))
from checks import check, exit_status  # noqa: E402


def run(tachyon: str, *argv: str, env: dict | None = None):
    return subprocess.run([tachyon, *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def run_json(tachyon: str, what: str, *argv: str):
    result = run(tachyon, *argv)
    try:
        value = json.loads(result.stdout)
    except json.JSONDecodeError:
        value = None
    check(f"{what} exits 0 with JSON", result.returncode == 0 and value is not None,
          f"exit {result.returncode}, stdout {result.stdout!r}, stderr {result.stderr!r}")
    return value


def expect_error(tachyon: str, what: str, argv: list[str], expected: str) -> None:
    result = run(tachyon, *argv)
    lines = result.stderr.splitlines()
    check(what, result.returncode == 1 and lines == [expected] and result.stdout == "",
          f"exit {result.returncode}, stderr {result.stderr!r}, expected {expected!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tachyon", default=str(ROOT / "build" / "tachyon"))
    args = parser.parse_args()
    t = args.tachyon
    work = Path(tempfile.mkdtemp(prefix="tachyon-gateway-commands-"))
    try:
        db = str(work / "keys.db")
        missing = str(work / "missing.db")
        expect_error(t, "list before any key exists", ["keys", "list", "--db", db],
                     f"tachyon: error: no database at {db} (create a key first with "
                     f"`tachyon keys create`)")
        check("a read command creates no database", not Path(db).exists())

        alice = run_json(t, "keys create --tier free", "keys", "create", "--name", "alice",
                         "--tier", "free", "--db", db, "--json")
        check("create --json has id, name and key",
              alice and alice["id"] == 1 and alice["name"] == "alice" and
              alice["key"].startswith("sk-tachyon-") and len(alice["key"]) == 54, repr(alice))
        check("free tier defaults", alice and (alice["rpm"], alice["tpm"], alice["concurrency"]) ==
              (20, 40000, 2), repr(alice))
        bob = run_json(t, "keys create with explicit limits", "keys", "create", "--name", "bob",
                       "--tier", "priority", "--rpm", "7", "--daily-tokens", "1000",
                       "--models", "m1, m2", "--max-tokens", "256", "--db", db, "--json")
        check("explicit flags override the tier",
              bob and (bob["tier"], bob["rpm"], bob["tpm"], bob["concurrency"], bob["daily_tokens"],
                       bob["max_tokens"], bob["models"]) ==
              ("priority", 7, 4000000, 64, 1000, 256, ["m1", "m2"]), repr(bob))
        carol = run_json(t, "keys create with the default tier", "keys", "create", "--name",
                         "carol", "--db", db, "--json")
        check("standard is the default tier", carol and (carol["tier"], carol["rpm"]) ==
              ("standard", 300), repr(carol))

        # Only a SHA-256 of each secret is stored.
        with sqlite3.connect(db) as connection:
            rows = dict(connection.execute("SELECT name, key_hash FROM api_keys").fetchall())
        check("the database holds the secret's SHA-256",
              alice and rows.get("alice") == hashlib.sha256(alice["key"].encode()).digest())
        raw = b"".join(p.read_bytes() for p in work.iterdir() if p.name.startswith("keys.db"))
        check("the secret itself is nowhere in the database files",
              alice and alice["key"][11:].encode() not in raw)

        listed = run_json(t, "keys list --json", "keys", "list", "--db", db, "--json")
        check("list shows every key and no secret",
              listed and [k["name"] for k in listed] == ["alice", "bob", "carol"] and
              all("key" not in k for k in listed) and alice and
              listed[0]["hint"] == alice["key"][:6] + "..." + alice["key"][-4:], repr(listed))
        text = run(t, "keys", "list", "--db", db)
        check("list as a table", text.returncode == 0 and "alice" in text.stdout and
              alice and alice["key"] not in text.stdout, text.stdout + text.stderr)

        updated = run_json(t, "keys update --rpm", "keys", "update", "alice", "--rpm", "0",
                           "--monthly-tokens", "5000", "--db", db, "--json")
        check("update changes only what is given",
              updated and (updated["rpm"], updated["tpm"], updated["monthly_tokens"]) ==
              (0, 40000, 5000), repr(updated))
        updated = run_json(t, "keys update by id with a new tier", "keys", "update", "2",
                           "--tier", "standard", "--models", "", "--db", db, "--json")
        check("a new tier resets its limits; --models '' allows all",
              updated and (updated["name"], updated["rpm"], updated["daily_tokens"],
                           updated["models"]) == ("bob", 300, 1000, []), repr(updated))

        revoked = run_json(t, "keys revoke", "keys", "revoke", "carol", "--db", db, "--json")
        check("revoke marks the key", revoked and revoked["revoked"] and revoked["revoked_at"],
              repr(revoked))
        again = run_json(t, "a revoked key's name can be reused", "keys", "create", "--name",
                         "carol", "--db", db, "--json")
        check("the new key gets a new id", again and again["id"] == 4, repr(again))

        # Default database: $TACHYON_HOME/tachyon.db.
        home = work / "home"
        result = run(t, "keys", "create", "--name", "dave", "--json", env={"TACHYON_HOME": str(home)})
        check("--db defaults to $TACHYON_HOME/tachyon.db",
              result.returncode == 0 and (home / "tachyon.db").exists(), result.stderr)

        # Mistakes: one line, exit 1.
        expect_error(t, "a duplicate name", ["keys", "create", "--name", "alice", "--db", db],
                     "tachyon: error: a key named 'alice' already exists")
        expect_error(t, "create without --name", ["keys", "create", "--db", db],
                     "tachyon: error: keys create needs --name NAME")
        expect_error(t, "a name with a space", ["keys", "create", "--name", "a b", "--db", db],
                     "tachyon: error: key name 'a b' has a character other than letters, "
                     "digits, '.', '_' and '-'")
        expect_error(t, "an all-digit name", ["keys", "create", "--name", "123", "--db", db],
                     "tachyon: error: key name '123' is all digits, which reads as an id")
        expect_error(t, "an unknown tier", ["keys", "create", "--name", "x", "--tier", "gold",
                                            "--db", db],
                     "tachyon: error: --tier must be free, standard or priority, got 'gold'")
        expect_error(t, "a negative limit", ["keys", "create", "--name", "x", "--rpm", "-5",
                                             "--db", db],
                     "tachyon: error: --rpm must be a whole number >= 0, got '-5'")
        expect_error(t, "a limit that is not a number", ["keys", "update", "alice", "--tpm",
                                                         "lots", "--db", db],
                     "tachyon: error: --tpm must be a whole number >= 0, got 'lots'")
        expect_error(t, "update an unknown name", ["keys", "update", "zed", "--rpm", "1",
                                                   "--db", db],
                     "tachyon: error: no key named 'zed'")
        expect_error(t, "revoke an unknown id", ["keys", "revoke", "99", "--db", db],
                     "tachyon: error: no key with id 99")
        result = run(t, "keys", "revoke", "1", "--db", db)
        check("revoke by id", result.returncode == 0 and result.stdout == "revoked key alice (id 1)\n",
              repr(result.stdout) + result.stderr)
        expect_error(t, "revoke twice", ["keys", "revoke", "1", "--db", db],
                     "tachyon: error: key 'alice' is already revoked")
        expect_error(t, "update a revoked key", ["keys", "update", "alice", "--rpm", "1",
                                                 "--db", db],
                     "tachyon: error: key 'alice' is revoked")

        # usage: empty, then with rows written as the server's ledger writes them.
        empty = run_json(t, "usage on a fresh database", "usage", "--db", db, "--json")
        check("no usage yet", empty == [], repr(empty))
        with sqlite3.connect(db) as connection:
            rows = [
                ("r1", 1710072000, 1, "alice", 100, 40, 10, "ok"),        # 2024-03-10
                ("r2", 1710072100, 1, "alice", 50, 0, 0, "error"),
                ("r3", 1710158400, 2, "bob", 30, 0, 20, "cancelled"),     # 2024-03-11
                ("r4", 1710158500, 2, "bob", 10, 5, 5, "ok"),
            ]
            connection.executemany(
                "INSERT INTO usage (request_id, unix_time, key_id, key_name, model, "
                "prompt_tokens, cached_tokens, completion_tokens, queue_seconds, ttft_seconds, "
                "duration_seconds, status, finish_reason) "
                "VALUES (?, ?, ?, ?, 'm', ?, ?, ?, 0, 0, 0, ?, 'stop')", rows)
        by_key = run_json(t, "usage --json", "usage", "--db", db, "--json")
        check("usage per key", by_key == [
            {"key": "alice", "requests": 2, "prompt_tokens": 150, "cached_tokens": 40,
             "completion_tokens": 10, "total_tokens": 160, "errors": 1, "cancelled": 0,
             "rejected": 0},
            {"key": "bob", "requests": 2, "prompt_tokens": 40, "cached_tokens": 5,
             "completion_tokens": 25, "total_tokens": 65, "errors": 0, "cancelled": 1,
             "rejected": 0}], repr(by_key))
        by_day = run_json(t, "usage --by day", "usage", "--db", db, "--by", "day", "--json")
        check("usage per UTC day", by_day and [(r["day"], r["requests"]) for r in by_day] ==
              [("2024-03-10", 2), ("2024-03-11", 2)], repr(by_day))
        since = run_json(t, "usage --since --key", "usage", "--db", db, "--since", "2024-03-11",
                         "--key", "bob", "--json")
        check("usage filtered by day and key", since and len(since) == 1 and
              since[0]["key"] == "bob" and since[0]["requests"] == 2, repr(since))
        text = run(t, "usage", "--db", db)
        check("usage as a table", text.returncode == 0 and "alice" in text.stdout and
              "REQUESTS" in text.stdout, text.stdout + text.stderr)

        expect_error(t, "usage --since not a date", ["usage", "--db", db, "--since", "2024-13-01"],
                     "tachyon: error: --since must be a date YYYY-MM-DD, got '2024-13-01'")
        expect_error(t, "usage --by week", ["usage", "--db", db, "--by", "week"],
                     "tachyon: error: --by must be day or key, got 'week'")
        expect_error(t, "usage --key unknown", ["usage", "--db", db, "--key", "nobody"],
                     "tachyon: error: no key named 'nobody'")
        expect_error(t, "usage without a database", ["usage", "--db", missing],
                     f"tachyon: error: no database at {missing}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
