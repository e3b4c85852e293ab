"""The check list the example prints: one line per check, and the exit code.

A check either passes, fails (the server answered, but not what the client expects), or
finds its route missing (404: a route sprout does not serve yet). Both of the last two
make the script exit 1. Server text is shown through repr() and cut short: it is
untrusted data, never evaluated.
"""

import traceback

MISSING = "missing"
FAIL = "FAIL"
OK = "ok"


class Failed(Exception):
    """A check's expectation that the server's answer did not meet."""


class RouteMissing(Exception):
    """The server answered 404 for a route a check needs."""


def expect(condition, message):
    if not condition:
        raise Failed(message)


def shown(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Report:
    def __init__(self, verbose=False):
        self.rows = []
        self.verbose = verbose

    def run(self, name, check, *args):
        """Runs `check(*args)`, which returns (one-line summary, value) or raises;
        returns the value (None when the check did not pass)."""
        try:
            summary, value = check(*args)
        except Exception as e:
            self._refused(name, e)
            return None
        self._add(OK, name, summary)
        return value

    async def run_async(self, name, check, *args):
        """As `run`, for a coroutine function."""
        try:
            summary, value = await check(*args)
        except Exception as e:
            self._refused(name, e)
            return None
        self._add(OK, name, summary)
        return value

    def _refused(self, name, error):
        """Records why a check did not pass: its own finding, a 404 (from the client
        or the SDK, whose errors carry `status` or `status_code`), or another error."""
        status = getattr(error, "status", None) or getattr(error, "status_code", None)
        if isinstance(error, RouteMissing):
            self._add(MISSING, name, str(error))
        elif isinstance(error, Failed):
            self._add(FAIL, name, str(error))
        elif status == 404:
            self._add(MISSING, name, f"404: {shown(str(error), 160)}")
        else:
            self._add(FAIL, name, f"{type(error).__name__}: {shown(str(error), 200)}")
        if self.verbose and not isinstance(error, Failed):
            traceback.print_exc()

    def skip(self, name, why):
        self._add(FAIL, name, f"not run: {why}")

    def _add(self, status, name, detail):
        self.rows.append((status, name, detail))
        print(f"{status:7} {name}: {detail}", flush=True)

    def summary(self):
        counts = {s: sum(1 for r in self.rows if r[0] == s) for s in (OK, FAIL, MISSING)}
        return (f"{counts[OK]} ok, {counts[FAIL]} failed, "
                f"{counts[MISSING]} missing routes, of {len(self.rows)} checks")

    def exit_code(self):
        return 0 if all(r[0] == OK for r in self.rows) else 1
