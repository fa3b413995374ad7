"""A Lua 5.4 sandbox (lupa) for ctx's script tools and connectors.

Every run gets a fresh ``LuaRuntime`` (about 40 µs), so nothing leaks between calls and each run has
its own memory cap. Inside, scripts see only: the base functions that cannot reach the host
(``pairs``, ``pcall``, ``setmetatable``, ...), ``string`` (guarded), ``table``, ``math``, ``utf8``,
``coroutine`` (wrapped), and the host modules handed in (``json``, ``log``, ``http``, ``env``,
``context``). ``os``, ``io``, ``debug``, ``require``, ``package``, ``load``, ``loadfile``, ``dofile``,
``collectgarbage``, ``string.dump`` and lupa's ``python`` module are gone, and an attribute filter
refuses every attribute of a Python object, so host functions cannot be used to climb into Python.

Time: a count hook runs every ``HOOK_EVERY`` instructions and checks an instruction budget and the
wall-clock deadline. Once either is exceeded, the hook is re-armed with ``count = 1`` on every Lua
thread, so each following instruction raises again: ``pcall`` can catch the error but cannot go on
running. Coroutines do not inherit hooks, so ``coroutine.create``/``wrap`` arm the new thread.
Hooks never fire inside C functions, so the pattern functions (``string.find/match/gmatch/gsub``)
refuse inputs whose worst case (subject length to the power of the pattern's repetitions, times
its length) is over ``PATTERN_BUDGET`` steps, ``string.rep`` refuses results over ``MAX_STRING``
(arguments coerced as the C function would) and returns empty results without looping, and
``table.insert/remove/move`` are Lua loops. Blocking host calls (``http``) get at most the time
that is left. Whatever still escapes the hook is stopped one level up: scripts run in worker
processes (``cairn_servers.ctx.luaproc``) that are killed past their deadline.

Memory: lupa converts Python values into Lua outside protected mode, where an allocation failure
is a Lua panic (abort), so conversions run with the cap lifted, measure first and stop with a clean
error once the state would be over its cap (:meth:`Sandbox.table`, :meth:`Sandbox.plain`).
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cairn_servers.core.errors import CairnError, ExtensionError, InvalidInput, Timeout

MAX_MEMORY = 64 << 20  # bytes per run
HOOK_EVERY = 1000  # instructions between budget checks
INSTRUCTIONS_PER_SECOND = 1_000_000_000  # instruction budget = timeout x this (Lua 5.4 runs ~3e8/s here)
PATTERN_BUDGET = 50_000_000  # worst-case matching steps one C pattern call may cost (~0.1 s measured)
MAX_SUBJECT = 1 << 20  # bytes a pattern function accepts as subject
MAX_PATTERN = 256  # pattern length
MAX_STRING = 4 << 20  # longest string.rep result
MAX_DEPTH = 64  # nesting of tables converted to/from Python
MAX_ITEMS = 1_000_000  # values converted from Lua to Python in one result

_TIMEOUT_MESSAGE = "ctx: time budget exceeded"

# Runs first, while debug/load are still present, and keeps what it needs as upvalues only.
_PRELUDE = r"""
local now, on_trip, HOOK_EVERY, MAX_SUBJECT, MAX_PATTERN, MAX_STRING, PATTERN_BUDGET, TIMEOUT = ...
local sethook, co_create, co_resume, co_running = debug.sethook, coroutine.create, coroutine.resume, coroutine.running
local s_find, s_match, s_gmatch, s_gsub, s_rep, s_byte, s_sub = string.find, string.match, string.gmatch, string.gsub, string.rep, string.byte, string.sub
local pack, unpack, type, error, tostring, setmetatable, load, select = table.pack, table.unpack, type, error, tostring, setmetatable, load, select
local main = co_running()
local threads = setmetatable({}, {__mode = "k"})
local deadline, max_ticks, ticks, tripped = math.huge, math.huge, 0, false

local hook
hook = function()
  if tripped then error(TIMEOUT, 0) end
  ticks = ticks + 1
  if ticks > max_ticks or now() > deadline then
    tripped = true
    on_trip(ticks > max_ticks)
    -- every later instruction raises again, in every thread: pcall cannot swallow the timeout
    sethook(main, hook, "", 1)
    for th in pairs(threads) do sethook(th, hook, "", 1) end
    error(TIMEOUT, 0)
  end
end

local function arm(th)
  sethook(th, hook, "", tripped and 1 or HOOK_EVERY)
end

coroutine.create = function(f)
  local co = co_create(f)
  threads[co] = true
  arm(co)
  return co
end
coroutine.wrap = function(f)
  local co = coroutine.create(f)
  return function(...)
    local r = pack(co_resume(co, ...))
    if r[1] then return unpack(r, 2, r.n) end
    error(r[2], 0)
  end
end

-- Lua runs xpcall message handlers and __gc finalizers with hooks disabled (a handler called for the
-- hook's own error, every finalizer): skip handlers once tripped, and refuse finalizers altogether.
local real_xpcall, rawget = xpcall, rawget
_G.xpcall = function(f, handler, ...)
  return real_xpcall(f, function(e)
    if tripped then return e end
    return handler(e)
  end, ...)
end
_G.setmetatable = function(t, mt)
  if type(mt) == "table" and rawget(mt, "__gc") ~= nil then
    error("setmetatable: __gc finalizers are not allowed in the sandbox", 2)
  end
  return setmetatable(t, mt)
end

-- Pattern cost: repetitions (* + - ?, %b and back-references %1-%9) multiply the work per start position.
local reps_of = {}
local function repetitions(p)
  local q = reps_of[p]
  if q then return q end
  q = 0
  local i, n, last = 1, #p, 0
  while i <= n do
    local c = s_byte(p, i)
    if c == 37 then -- %x escape; %bxy balances, %f[set] is a frontier, %1-%9 compare a capture
      local d = s_byte(p, i + 1)
      if d == 98 then q = q + 1; i = i + 4
      elseif d and d >= 49 and d <= 57 then q = q + 1; i = i + 2
      elseif d == 102 then i = i + 2
      else i = i + 2 end
    elseif c == 91 then -- [set]
      i = i + 1
      if s_byte(p, i) == 94 then i = i + 1 end
      if s_byte(p, i) == 93 then i = i + 1 end
      while i <= n and s_byte(p, i) ~= 93 do
        if s_byte(p, i) == 37 then i = i + 1 end
        i = i + 1
      end
      i = i + 1
    else
      if c == 42 or c == 43 or c == 45 or c == 63 then q = q + 1; last = i end
      i = i + 1
    end
  end
  -- A * + - ? that ends the pattern (only capture closes after it) cannot backtrack into anything
  -- that fails, so it costs one pass over its run: "%s+" in gsub is linear.
  if last > 0 and not s_find(p, "[^)]", last + 1) then q = q - 1 end
  reps_of[p] = q
  return q
end

local function guard(name, s, p, plain)
  if type(s) == "number" then s = tostring(s) end
  if type(p) == "number" then p = tostring(p) end
  if type(s) ~= "string" or type(p) ~= "string" then return end
  local n = #s
  if n > MAX_SUBJECT then
    error(name .. ": the subject is " .. n .. " bytes; the sandbox allows " .. MAX_SUBJECT .. ". Work on smaller pieces.", 3)
  end
  if plain then return end
  if #p > MAX_PATTERN then
    error(name .. ": the pattern is " .. #p .. " bytes; the sandbox allows " .. MAX_PATTERN .. ".", 3)
  end
  local e = repetitions(p) + (s_byte(p, 1) == 94 and 0 or 1)
  if (n + 1.0) ^ e * (#p + 1) > PATTERN_BUDGET then
    error(name .. ": a pattern with " .. repetitions(p) .. " repetition(s) over " .. n ..
      " bytes could run too long in the sandbox. Use a simpler pattern, plain find, or a shorter text.", 3)
  end
end

string.find = function(s, p, init, plain) guard("string.find", s, p, plain); return s_find(s, p, init, plain) end
string.match = function(s, p, init) guard("string.match", s, p); return s_match(s, p, init) end
string.gmatch = function(s, p, init) guard("string.gmatch", s, p); return s_gmatch(s, p, init) end
string.gsub = function(s, p, r, n) guard("string.gsub", s, p); return s_gsub(s, p, r, n) end
-- Arguments as the C functions would coerce them (numeric strings are numbers, numbers are
-- strings), so a check sees the values the C function will use.
local tointeger, tonumber = math.tointeger, tonumber
local function int_arg(v, fname, i)
  local n = tonumber(v)
  local k = n and tointeger(n)
  if not k then
    error("bad argument #" .. i .. " to '" .. fname .. "' (number has no integer representation)", 3)
  end
  return k
end
local function str_arg(v, fname, i)
  local t = type(v)
  if t == "number" then return tostring(v) end
  if t ~= "string" then error("bad argument #" .. i .. " to '" .. fname .. "' (string expected, got " .. t .. ")", 3) end
  return v
end

-- string.rep loops n times in C even for an empty string: check the coerced count, not the text.
string.rep = function(s, n, sep)
  s = str_arg(s, "rep", 1)
  n = int_arg(n, "rep", 2)
  if sep ~= nil then sep = str_arg(sep, "rep", 3) end
  if n <= 0 then return "" end
  local size = #s * n + (sep and #sep * (n - 1) or 0)
  if size == 0 then return "" end
  if size > MAX_STRING then
    error("string.rep: a result of " .. size .. " bytes is over the sandbox limit of " .. MAX_STRING .. ".", 2)
  end
  return s_rep(s, n, sep)
end

-- table.insert/remove/move loop in C over a length or range the script chooses (a __len
-- metamethod can claim 2^62): run them as Lua loops, which the count hook interrupts.
local function tbl_arg(t, fname)
  if type(t) ~= "table" then
    error("bad argument #1 to '" .. fname .. "' (table expected, got " .. type(t) .. ")", 3)
  end
end
table.insert = function(t, ...)
  tbl_arg(t, "insert")
  local nargs = select("#", ...)
  local e = #t + 1
  if nargs == 1 then
    t[e] = ...
    return
  elseif nargs ~= 2 then
    error("wrong number of arguments to 'insert'", 2)
  end
  local pos, v = ...
  pos = int_arg(pos, "insert", 2)
  if pos < 1 or pos > e then error("bad argument #2 to 'insert' (position out of bounds)", 2) end
  for i = e, pos + 1, -1 do t[i] = t[i - 1] end
  t[pos] = v
end
table.remove = function(t, pos)
  tbl_arg(t, "remove")
  local size = #t
  if pos == nil then pos = size else pos = int_arg(pos, "remove", 2) end
  if pos ~= size and (pos < 1 or pos > size + 1) then
    error("bad argument #2 to 'remove' (position out of bounds)", 2)
  end
  local v = t[pos]
  for i = pos, size - 1 do t[i] = t[i + 1] end
  if pos <= size then t[size] = nil end
  return v
end
table.move = function(a1, f, e, tpos, a2)
  tbl_arg(a1, "move")
  f, e, tpos = int_arg(f, "move", 2), int_arg(e, "move", 3), int_arg(tpos, "move", 4)
  if a2 == nil then a2 = a1 elseif type(a2) ~= "table" then
    error("bad argument #5 to 'move' (table expected, got " .. type(a2) .. ")", 2)
  end
  if e >= f then
    if not (f > 0 or e < math.maxinteger + f) then error("bad argument #3 to 'move' (too many elements to move)", 2) end
    if tpos > math.maxinteger - (e - f) then error("bad argument #4 to 'move' (destination wrap around)", 2) end
    if tpos > e or tpos <= f or a1 ~= a2 then
      for i = 0, e - f do a2[tpos + i] = a1[f + i] end
    else
      for i = e - f, 0, -1 do a2[tpos + i] = a1[f + i] end
    end
  end
  return a2
end
string.dump = nil

-- Compile text only (never bytecode) with the sandbox's globals.
local function compile(source, name)
  local f, e = load(source, "=" .. name, "t", _G)
  return f or false, e or ""
end

local function start(seconds, instructions)
  deadline, max_ticks, ticks = now() + seconds, instructions / HOOK_EVERY, 0
  arm(main)
end

local function halt()
  tripped = true
  sethook(main, hook, "", 1)
end


-- Host functions return (true, value) or (false, message); the message becomes a plain Lua error.
local function make_host(fn)
  return function(...)
    local ok, value = fn(...)
    if not ok then error(value, 2) end
    return value
  end
end

for _, name in ipairs({"os", "io", "debug", "require", "package", "load", "loadfile", "dofile",
                       "collectgarbage", "python", "print", "warn"}) do
  _G[name] = nil
end
return compile, start, halt, sethook, main, make_host
"""


class SandboxViolation(AttributeError):
    """Lua tried to reach into a Python object."""


def _deny_attributes(obj: Any, name: Any, is_setting: bool) -> Any:
    raise SandboxViolation("Python attributes are not accessible from the Lua sandbox")


@dataclass
class Run:
    """State of one sandboxed run, shared with the host functions."""

    label: str
    timeout: float
    deadline: float = 0.0
    tripped: bool = False
    by_instructions: bool = False
    logs: list[str] = field(default_factory=list)
    host_error: CairnError | None = None  # the last error a host function raised into the script

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class Sandbox:
    """One fresh Lua state: load a script, call its functions under the time and memory budget."""

    def __init__(self, label: str, timeout: float, *, max_memory: int = MAX_MEMORY) -> None:
        from lupa import lua54

        self.run = Run(label=label, timeout=timeout)
        self.run.deadline = time.monotonic() + timeout  # one budget for the whole run, conversions included
        self.lua = lua54.LuaRuntime(register_eval=False, register_builtins=False, unpack_returned_tuples=True,
                                    attribute_filter=_deny_attributes, max_memory=max_memory)
        prelude = self.lua.execute(_PRELUDE, time.monotonic, self._trip, HOOK_EVERY, MAX_SUBJECT, MAX_PATTERN,
                                   MAX_STRING, PATTERN_BUDGET, _TIMEOUT_MESSAGE)
        self._compile, self._start, self._halt, self._sethook, self._main, self.make_host = prelude
        self.globals = self.lua.globals()
        self.globals["print"] = self._print
        self._cap = self.lua.get_max_memory(total=True)  # the memory cap, the state's own base included

    def _trip(self, by_instructions: bool) -> None:
        self.run.tripped = True
        self.run.by_instructions = bool(by_instructions)

    def _print(self, *args: Any) -> None:
        log_line(self.run.label, "info", "\t".join(_show(a) for a in args))

    # -- host values ------------------------------------------------------------------------------

    def set_global(self, name: str, value: Any) -> None:
        self.globals[name] = value

    def table(self, value: Any) -> Any:
        """A Python dict/list/scalar as a Lua value (nested tables, no Python objects).

        lupa builds tables through the Lua API outside any protected call, where running out of
        memory is a Lua panic (the process aborts). So the cap is lifted while converting, and the
        converter itself stops with a clean error once the state would be over its cap."""
        room = self._cap - self.lua.get_memory_used(total=True)
        if self._cap and _lua_size(value, room) > room:
            raise ExtensionError(f"{self.run.label}: the value does not fit the sandbox's memory "
                                 f"({self._cap >> 20} MiB per run); pass or fetch less data.")
        try:
            with self._uncapped():
                return to_lua(self.lua, value, budget=_Budget(self.lua, self._cap, self.run))
        except CairnError as exc:
            # The traceback's frames hold the half-built tables: drop them so Lua can collect them.
            exc.__traceback__ = None
            raise exc from None

    def plain(self, value: Any, label: str) -> Any:
        """A Lua value as JSON-ready Python data (wrapping Lua tables allocates registry slots:
        the cap is lifted for the same reason as in :meth:`table`)."""
        with self._uncapped():
            return from_lua(value, label)

    @contextmanager
    def _uncapped(self) -> Iterator[None]:
        self.lua.set_max_memory(0)
        try:
            yield
        finally:
            self.lua.set_max_memory(self._cap, total=True)

    def module(self, functions: dict[str, Any]) -> Any:
        t = self.lua.table()
        for k, v in functions.items():
            t[k] = v
        return t

    # -- running ----------------------------------------------------------------------------------

    def execute(self, source: str, name: str) -> Any:
        """Run a chunk of Lua source (text only) under the budget; returns its first result."""
        chunk, err = self._compile(source, name)
        if not chunk:
            raise ExtensionError(f"{self.run.label}: Lua syntax error: {err}")
        return self.call(chunk)

    def call(self, fn: Any, *args: Any) -> Any:
        """Call a Lua function under the budget; Lua values come back as Python data."""
        from lupa import lua54

        if not self.run.deadline:  # one budget for the whole run: loading the script and calling it
            self.run.deadline = time.monotonic() + self.run.timeout
        left = self.run.remaining()
        self._start(left, max(1_000_000.0, left * INSTRUCTIONS_PER_SECOND))
        try:
            result = fn(*args)
            if isinstance(result, tuple):  # several return values: the first one is the result
                result = result[0] if result else None
            if self.run.tripped:  # e.g. `return pcall(f)` handed back the caught timeout
                raise self._timeout()
            return self.plain(result, self.run.label)
        except lua54.LuaMemoryError:
            raise ExtensionError(
                f"{self.run.label}: ran out of memory (the sandbox allows {MAX_MEMORY >> 20} MiB per run)."
            ) from None
        except lua54.LuaError as exc:
            if self.run.tripped:
                raise self._timeout() from None
            message = _lua_message(exc)
            if "not enough memory" in message:
                raise ExtensionError(
                    f"{self.run.label}: ran out of memory (the sandbox allows {MAX_MEMORY >> 20} MiB per run)."
                ) from None
            raise self._uncaught(message) from None
        except SandboxViolation as exc:
            raise ExtensionError(f"{self.run.label}: {exc}") from None
        except UnicodeDecodeError:
            raise ExtensionError(f"{self.run.label}: returned a string that is not valid UTF-8.") from None
        except RecursionError:
            raise ExtensionError(f"{self.run.label}: returned a value nested too deeply.") from None
        finally:
            # debug.sethook is a C function: calling it from Python runs no Lua instruction, so no hook.
            self._sethook(self._main)

    def _uncaught(self, message: str) -> CairnError:
        """The error for a script that failed: a host error the script did not catch keeps its class
        (an empty search query stays bad input, 400, not a script failure, 500)."""
        host = self.run.host_error
        if host is not None and message.endswith(host.message):
            try:
                err = copy.copy(host)
                err.message = f"{self.run.label}: {message}"
                err.args = (err.message,)
                return err
            except Exception:  # noqa: BLE001 (an exotic subclass: fall back to the extension error)
                pass
        return ExtensionError(f"{self.run.label}: {message}")

    def _timeout(self) -> Timeout:
        what = "instruction budget" if self.run.by_instructions else f"time limit of {self.run.timeout:g} s"
        return Timeout(f"{self.run.label}: exceeded its {what}. Raise `timeout` in its config or make it do less.")

    def close(self) -> None:
        """Stop anything still able to run (finalizers), then drop every reference to the Lua state.

        The state holds host callables bound to this sandbox, so sandbox and state form a reference
        cycle that only the cyclic GC frees; a server that collects rarely (``ctx serve`` raises the
        GC thresholds) would keep every finished run's Lua heap. Clearing our side frees the state
        by reference counting as soon as the caller returns.
        """
        try:
            self._halt()
        except Exception:
            pass
        self.__dict__.clear()


def _lua_message(exc: Exception) -> str:
    text = str(exc)
    # lupa appends a Lua stack traceback; the first line names the script and line.
    return text.split("\nstack traceback:")[0].strip() or "Lua error"


def _show(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, str) or value is None or isinstance(value, (int, float, bool)):
        return "nil" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return "<" + _lua_type(value) + ">"


def _lua_type(value: Any) -> str:
    from lupa import lua54

    return str(lua54.lua_type(value) or type(value).__name__)


def log_line(label: str, level: str, message: str) -> None:
    """A log line from a script, on stderr (stdout may carry JSON-RPC)."""
    from cairn_servers.core.sanitize import scrub

    sys.stderr.write(f"ctx: {label}: {level}: {scrub(message[:4000])}\n")


def _lua_size(value: Any, limit: int) -> int:
    """A lower bound of the bytes ``value`` takes as Lua values (table 56 bytes, array slot 16 and
    arrays grow by doubling, hash node 24, string 25 + length); stops counting past ``limit``."""
    total = _own_size(value)
    stack = [value] if isinstance(value, (dict, list, tuple)) else []
    while stack and total <= limit:
        v = stack.pop()
        for x in v.values() if isinstance(v, dict) else v:
            if isinstance(x, str):
                total += 25 + len(x)
            elif isinstance(x, (dict, list, tuple)):
                total += _own_size(x)
                if x:
                    stack.append(x)
            else:
                continue
            if total > limit:
                break
    return total


def too_big(value: Any, room: int) -> bool:
    """Whether ``value`` as Lua tables and strings certainly takes more than ``room`` bytes."""
    return _lua_size(value, room) > room


def _own_size(v: Any) -> int:
    if isinstance(v, str):
        return 25 + len(v)
    if isinstance(v, dict):
        return 56 + 24 * len(v)
    if isinstance(v, (list, tuple)):
        return 56 + (16 << max(len(v) - 1, 0).bit_length() if v else 0)
    return 0


class _Budget:
    """Checks a conversion into Lua as it goes: the state's memory against its cap (every
    ``CHECK_EVERY`` values, and before each long string) and the run's deadline."""

    CHECK_EVERY = 512

    def __init__(self, lua: Any, cap: int, run: "Run | None" = None) -> None:
        self.lua, self.cap, self.run = lua, cap, run
        self.count = 0

    def tick(self, extra: int = 0) -> None:
        self.count += 1
        if extra < 4096 and self.count % self.CHECK_EVERY:
            return
        if self.cap and self.lua.get_memory_used(total=True) + extra > self.cap:
            raise ExtensionError(f"{self.run.label if self.run else 'value'}: the value does not fit the sandbox's "
                                 f"memory ({self.cap >> 20} MiB per run); pass or fetch less data.")
        if self.run is not None and self.run.deadline and time.monotonic() > self.run.deadline:
            self.run.tripped = True
            raise Timeout(f"{self.run.label}: exceeded its time limit of {self.run.timeout:g} s "
                          "while converting a value for Lua.")


def to_lua(lua: Any, value: Any, depth: int = 0, budget: _Budget | None = None) -> Any:
    """Python data -> Lua value: dicts and lists become tables; other objects are refused."""
    if depth > MAX_DEPTH:
        raise InvalidInput("The value is nested too deeply for Lua.")
    if budget is not None:
        budget.tick(len(value) if isinstance(value, str) else 0)
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        shown = str(value) if len(str(value)) <= 30 else str(value)[:27] + "..."
        raise InvalidInput(f"{shown} does not fit a Lua integer: use a number from -2^63 to 2^63-1.")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        t = lua.table()
        for k, v in value.items():
            if v is not None:
                t[k if isinstance(k, (int, str)) else str(k)] = to_lua(lua, v, depth + 1, budget)
        return t
    if isinstance(value, (list, tuple)):
        t = lua.table()
        for i, v in enumerate(value, 1):
            t[i] = to_lua(lua, v, depth + 1, budget)
        return t
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return to_lua(lua, asdict(value), depth, budget)
    return str(value)


def from_lua(value: Any, label: str, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Lua value -> JSON-ready Python data. Tables with keys 1..n are lists (an empty table is a list)."""
    from lupa import lua54

    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ExtensionError(f"{label}: returned a number JSON cannot carry ({value}).")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    kind = lua54.lua_type(value)
    if kind != "table":
        raise ExtensionError(f"{label}: returned a Lua {kind or type(value).__name__}, which JSON cannot carry.")
    if depth > MAX_DEPTH:
        raise ExtensionError(f"{label}: returned tables nested more than {MAX_DEPTH} deep (a cycle?).")
    budget = budget if budget is not None else [MAX_ITEMS]
    items = list(value.items())
    budget[0] -= len(items)
    if budget[0] < 0:
        raise ExtensionError(f"{label}: returned more than {MAX_ITEMS} values.")
    keys = [k for k, _ in items]
    if all(isinstance(k, int) and not isinstance(k, bool) for k in keys) and sorted(keys) == list(range(1, len(keys) + 1)):
        ordered = sorted(items, key=lambda kv: kv[0])
        return [from_lua(v, label, depth + 1, budget) for _, v in ordered]
    out: dict[str, Any] = {}
    for k, v in items:
        if isinstance(k, float) and k.is_integer():
            k = int(k)
        if not isinstance(k, (str, int)) or isinstance(k, bool):
            raise ExtensionError(f"{label}: returned a table with a {lua54.lua_type(k) or type(k).__name__} key.")
        out[str(k)] = from_lua(v, label, depth + 1, budget)
    return out


def read_script(path: Path, label: str) -> str:
    """The script's text; a missing or unreadable file is a clear error."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        from cairn_servers.core.errors import NotFound

        raise NotFound(f"{label}: script {path} does not exist. Fix `path` in the config.") from None
    except OSError as exc:
        raise ExtensionError(f"{label}: cannot read script {path}: {exc.strerror}.") from None
    if data.startswith(b"\x1bLua"):
        raise ExtensionError(f"{label}: {path} is precompiled Lua bytecode; only Lua source is accepted.")
    return data.decode("utf-8", "replace")


def wrap_host(sandbox: Sandbox, fn: Callable[..., Any]) -> Any:
    """A host function for Lua: Lua arguments in, Lua values out; a CairnError becomes a Lua error
    carrying its message (a string, so scripts can ``pcall`` it and print it)."""

    def host(*args: Any) -> tuple[bool, Any]:
        if sandbox.run.tripped:
            return False, _TIMEOUT_MESSAGE
        try:
            return True, sandbox.table(fn(*args))
        except CairnError as exc:
            sandbox.run.host_error = exc
            return False, exc.message

    return sandbox.make_host(host)
