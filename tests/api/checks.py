"""The house style of the API tests: `check` prints one ok/FAIL line per assertion and counts it,
`info` prints context, `section` runs a group of checks so that an exception in it is one
failure and the rest still run (and prints how long it took), `exit_status` prints the counts and returns 1 when anything
failed, else 0."""
import sys
import threading
import time
import traceback

results = {"passed": 0, "failed": 0}
_lock = threading.Lock()  # a test may run sections on several threads


def check(what: str, condition, detail: object = "") -> bool:
    with _lock:
        if condition:
            results["passed"] += 1
            print(f"ok    {what}")
        else:
            results["failed"] += 1
            print(f"FAIL  {what}: {detail}")
        sys.stdout.flush()
    return bool(condition)


def info(what: str) -> None:
    with _lock:
        print(f"info  {what}")
        sys.stdout.flush()


def section(name: str, function, *args) -> None:
    start = time.monotonic()
    try:
        function(*args)
    except Exception as error:  # noqa: BLE001
        check(f"{name} (ran without raising)", False,
              f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=6)}")
    info(f"section {name!r}: {time.monotonic() - start:.1f} s")


def exit_status() -> int:
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0
