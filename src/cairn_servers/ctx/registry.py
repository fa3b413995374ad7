"""``ctx registry``: extension registries, git repositories of Lua tools, agents and connectors.

A registry is declared in ctx.toml as Context Harness declares it, ``[registries.NAME]`` with ``url``
(a git URL or a local path), ``branch`` (default ``main``), ``path`` (where the checkout lives; default
``$XDG_DATA_HOME/ctx/registries/NAME``), ``readonly`` and ``auto_update``, plus ``timeout`` (seconds per
git command, default 120). Its ``registry.toml`` lists the extensions (``[tools.NAME]``,
``[agents.NAME]``, ``[connectors.NAME]`` with ``path``, ``description``, ``tags``, ``required_config``,
``host_apis``, ``tools``); a registry without one is read by convention (``tools/NAME/tool.lua``,
``agents/NAME/agent.lua`` or ``agent.toml``, ``connectors/NAME/connector.lua``). When two registries
hold the same extension, the one declared later wins.

Everything a registry holds is untrusted: a path from it must be relative, must not climb out with
``..`` and must not pass through a symlink, an extension's name must be a name ctx.toml accepts, and
files are capped at 1 MiB. git runs from an argument list (no shell), without prompts, with the
``ext::`` transport off and symlinks checked out as plain files, under a timeout; a clone appears whole
or not at all (cloned aside, then renamed into place).

``install`` clones registries; given an extension (``tools/NAME``), it copies the script beside
ctx.toml (``tools/NAME.lua``, as ``ctx tool init`` writes one) after loading it in the sandbox, and adds
its section to ctx.toml for a tool or agent (a connector's section is printed: it needs settings and
credentials first). These are commands of the CLI only: no HTTP route or MCP tool changes a project's
extensions.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import (CairnError, Conflict, InvalidInput, NetworkError, NotFound, StorageError,
                                       Timeout, TooLarge)
from cairn_servers.core.files import replace_file

if TYPE_CHECKING:
    from cairn_servers.ctx.config import Config, RegistryConfig

MANIFEST = "registry.toml"
MAX_FILE = 1 << 20  # a manifest, script or README larger than this is refused
FOLDERS = {"tools": "tool", "agents": "agent", "connectors": "connector"}  # manifest table / folder -> kind
_CONVENTION = {"tools": ("tool.lua",), "agents": ("agent.lua", "agent.toml"), "connectors": ("connector.lua",)}
_LISTS = ("tags", "required_config", "host_apis", "tools")


@dataclass
class Extension:
    """One extension a registry offers."""

    id: str  # tools/NAME, agents/NAME, connectors/NAME
    kind: str  # tool, agent, connector
    name: str
    registry: str
    path: str  # the script, relative to the registry's root
    description: str = ""
    tags: list[str] = field(default_factory=list)
    required_config: list[str] = field(default_factory=list)
    host_apis: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    problem: str | None = None  # why it cannot be installed (a path leaving the registry, ...)


def checkout(reg: RegistryConfig) -> Path:
    """Where ``reg``'s files are (or will be): its ``path``, else ctx's data directory."""
    if reg.path is not None:
        return reg.path
    from cairn_servers.core.paths import data_dir

    return data_dir("ctx") / "registries" / reg.name


# ---- git ----------------------------------------------------------------------------------------


def _git(args: list[str], timeout: float, what: str, cwd: Path | None = None) -> str:
    """``git ARGS`` without a shell or a prompt; its stdout. A failure raises with git's last line."""
    import signal
    import subprocess

    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    argv = ["git", "-c", "protocol.ext.allow=never", "-c", "core.symlinks=false", *args]
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        raise NotFound("git is not installed (or not on PATH); ctx registries are git repositories.") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # git's helpers (git-remote-https, ssh) too
        proc.communicate()
        raise Timeout(f"{what}: git took longer than {timeout:g} s. Raise `timeout` in the registry's section, "
                      "or check the network.") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        raise _GitFailed(" ".join(lines[-2:])[:300] or f"exit status {proc.returncode}")
    return out.decode("utf-8", "replace")


class _GitFailed(Exception):
    pass


def _clone_error(reg: RegistryConfig, reason: str) -> CairnError:
    low = reason.lower()
    if "remote branch" in low and "not found" in low:
        return NotFound(f"Registry {reg.name!r}: {reg.url} has no branch {reg.branch!r}. Set `branch` in "
                        f"[registries.{reg.name}].")
    if "does not appear to be a git repository" in low or "does not exist" in low or "not found" in low:
        return NotFound(f"Registry {reg.name!r}: no git repository at {reg.url} ({reason}). Fix `url` in "
                        f"[registries.{reg.name}].")
    return NetworkError(f"Registry {reg.name!r}: cannot clone {reg.url}: {reason}. Check the URL and the network.")


def _head(root: Path, timeout: float) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        return _git(["rev-parse", "HEAD"], timeout, "git rev-parse", root).strip() or None
    except _GitFailed:
        return None


def clone(reg: RegistryConfig) -> dict[str, Any]:
    """Clone ``reg`` unless it is on disk already: ``{"registry", "status": "cloned"|"present"|"local", ...}``."""
    import shutil

    root = checkout(reg)
    if root.exists():
        return {"registry": reg.name, "status": "present", "path": str(root), "commit": _head(root, reg.timeout)}
    if reg.url is None:
        raise NotFound(f"Registry {reg.name!r} has no `url` and its path {root} does not exist. Create the folder "
                       f"or add `url` to [registries.{reg.name}].")
    url = reg.url
    tmp = root.with_name(f".{root.name}.clone-{os.getpid()}")
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _git(["clone", "--quiet", "--depth", "1", "--no-tags", "--branch", reg.branch, "--", url, str(tmp)],
                 reg.timeout, f"Registry {reg.name!r}")
        except _GitFailed as exc:
            raise _clone_error(reg, str(exc)) from None
        os.rename(tmp, root)
    except OSError as exc:
        raise StorageError(f"Registry {reg.name!r}: cannot write {root}: {exc.strerror}.") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _load(reg, root)
    counts = {kind: sum(1 for e in found if e.kind == kind) for kind in FOLDERS.values()}
    return {"registry": reg.name, "status": "cloned", "path": str(root), "commit": _head(root, reg.timeout),
            "counts": counts}


# ---- reading a registry -------------------------------------------------------------------------


def safe_file(root: Path, rel: str) -> Path:
    """``root/rel`` when ``rel`` stays inside ``root``: relative, no ``..``, no symlink on the way, a
    regular file. Anything else is refused (InvalidInput)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
        raise InvalidInput(f"{rel!r} is not a relative path inside the registry")
    parts = rel.split("/")
    if rel.startswith("/") or ":" in parts[0] or any(p in ("", ".", "..") for p in parts):
        raise InvalidInput(f"{rel!r} leaves the registry or is not a plain relative path")
    here = root
    for i, part in enumerate(parts):
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            raise InvalidInput(f"{rel!r} does not exist in the registry") from None
        except OSError as exc:
            raise InvalidInput(f"{rel!r} cannot be read: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise InvalidInput(f"{rel!r} passes through a symlink ({'/'.join(parts[:i + 1])}); refused")
        if i == len(parts) - 1 and not stat.S_ISREG(st.st_mode):
            raise InvalidInput(f"{rel!r} is not a regular file")
    return here


def _read(path: Path, what: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise InvalidInput(f"{what}: cannot read {path.name}: {exc.strerror}.") from None
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_FILE + 1)
    if len(data) > MAX_FILE:
        raise TooLarge(f"{what}: {path.name} is larger than {MAX_FILE >> 20} MiB; refused.")
    return data


def _load(reg: RegistryConfig, root: Path) -> list[Extension]:
    """The extensions of one checked-out registry (its manifest, else its folders)."""
    import tomllib

    from cairn_servers.ctx.scaffold import check_name

    manifest = root / MANIFEST
    if os.path.lexists(manifest):
        what = f"Registry {reg.name!r}"
        try:
            data = tomllib.loads(_read(safe_file(root, MANIFEST), what).decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"{what}: {MANIFEST} is not valid TOML: {exc}.") from None
        except InvalidInput as exc:
            raise InvalidInput(f"{what}: {MANIFEST}: {exc.message}.") from None
    else:
        data = _by_convention(root)
    found: list[Extension] = []
    for folder, kind in FOLDERS.items():
        table = data.get(folder, {})
        if not isinstance(table, dict):
            raise InvalidInput(f"Registry {reg.name!r}: [{folder}] in {MANIFEST} must be a table of extensions.")
        for name, entry in table.items():
            ext = Extension(id=f"{folder}/{name}", kind=kind, name=str(name), registry=reg.name, path="")
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                ext.problem = f"[{folder}.{name}] needs a `path` (the script, relative to the registry)"
                found.append(ext)
                continue
            ext.path = entry["path"]
            ext.description = entry["description"] if isinstance(entry.get("description"), str) else ""
            for key in _LISTS:
                value = entry.get(key, [])
                setattr(ext, key, [str(v) for v in value] if isinstance(value, list) else [])
            try:
                check_name(kind, ext.name)
                safe_file(root, ext.path)
                if not ext.path.endswith((".lua", ".toml")) or (kind != "agent" and not ext.path.endswith(".lua")):
                    raise InvalidInput(f"{ext.path!r} is not a Lua script" + (" or agent TOML" if kind == "agent"
                                                                               else ""))
            except InvalidInput as exc:
                ext.problem = exc.message
            found.append(ext)
    return found


def _by_convention(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for folder, scripts in _CONVENTION.items():
        table: dict[str, Any] = {}
        try:
            entries = sorted(os.scandir(root / folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                continue
            script = next((s for s in scripts if os.path.lexists(os.path.join(entry.path, s))), None)
            if script is not None:
                table[entry.name] = {"path": f"{folder}/{entry.name}/{script}"}
        data[folder] = table
    return data


def catalog(conf: Config) -> tuple[list[dict[str, Any]], list[Extension]]:
    """The registries (with counts) and the extensions they offer, a later registry's winning."""
    from cairn_servers.ctx.config import mask_url

    regs: list[dict[str, Any]] = []
    chosen: dict[str, Extension] = {}
    for reg in conf.registries:
        root = checkout(reg)
        installed = root.is_dir()
        found = _load(reg, root) if installed else []
        counts = {f"{kind}s": sum(1 for e in found if e.kind == kind) for kind in FOLDERS.values()}
        regs.append({"name": reg.name, "url": mask_url(reg.url) if reg.url else None, "branch": reg.branch, "path": str(root),
                     "installed": installed, "git": (root / ".git").exists(), "readonly": reg.readonly,
                     "commit": _head(root, reg.timeout) if installed else None, **counts})
        for ext in found:
            chosen[ext.id] = ext
    return regs, sorted(chosen.values(), key=lambda e: (e.kind, e.name))


def _registry(conf: Config, name: str) -> RegistryConfig:
    for reg in conf.registries:
        if reg.name == name:
            return reg
    names = ", ".join(r.name for r in conf.registries) or "none: add a [registries.NAME] section to ctx.toml"
    raise NotFound(f"No registry named {name!r}. Registries: {names}.")


def find(conf: Config, ident: str) -> Extension:
    """The extension ``tools/NAME`` (``tool/NAME`` too), or ``NAME`` when one kind alone has it."""
    regs, exts = catalog(conf)
    folder, slash, name = ident.partition("/")
    if slash:
        folder = folder if folder in FOLDERS else f"{folder}s"
        if folder not in FOLDERS:
            raise InvalidInput(f"{ident!r}: the kind is one of {', '.join(FOLDERS)} (as in tools/NAME).")
        hits = [e for e in exts if e.id == f"{folder}/{name}"]
    else:
        hits = [e for e in exts if e.name == ident]
    if len(hits) > 1:
        raise InvalidInput(f"{ident!r} names {len(hits)} extensions ({', '.join(e.id for e in hits)}); give one "
                           "as KIND/NAME.")
    if not hits:
        missing = [r["name"] for r in regs if not r["installed"]]
        hint = (f" Not installed yet: {', '.join(missing)} (run `ctx registry install`)." if missing else
                " See `ctx registry list`.")
        raise NotFound(f"No extension {ident!r} in any registry.{hint}")
    return hits[0]


def _root(conf: Config, ext: Extension) -> Path:
    return checkout(_registry(conf, ext.registry))


# ---- the commands -------------------------------------------------------------------------------


def listing(conf: Config) -> dict[str, Any]:
    """``ctx registry list``."""
    regs, exts = catalog(conf)
    return {"registries": regs, "extensions": [e.__dict__ for e in exts]}


def search(conf: Config, words: list[str]) -> list[dict[str, Any]]:
    """``ctx registry search WORDS``: the extensions whose id, description or tags hold every word."""
    wanted = [w.lower() for w in words if w.strip()]
    if not wanted:
        raise InvalidInput("Give at least one word to search for.")
    hits = []
    for ext in catalog(conf)[1]:
        text = " ".join([ext.id, ext.description, *ext.tags]).lower()
        if all(w in text for w in wanted):
            hits.append(ext.__dict__)
    return hits


def info(conf: Config, ident: str) -> dict[str, Any]:
    """``ctx registry info KIND/NAME``: the extension, its script's location and its README."""
    ext = find(conf, ident)
    root = _root(conf, ext)
    readme = None
    if ext.problem is None:
        folder = ext.path.rpartition("/")[0]
        try:
            readme = _read(safe_file(root, f"{folder}/README.md" if folder else "README.md"), ext.id).decode(
                "utf-8", "replace")
        except InvalidInput:  # none, or not a plain file inside the registry
            readme = None
    return {**ext.__dict__, "script": str(root / ext.path) if ext.path else None, "readme": readme}


def install(conf: Config, name: str | None, force: bool = False) -> dict[str, Any]:
    """``ctx registry install [NAME]``: clone the registries (or the one named) not on disk yet; with an
    extension (``tools/NAME``), install that extension into the project."""
    if name is None or any(r.name == name for r in conf.registries) and "/" not in name:
        regs = conf.registries if name is None else [_registry(conf, name)]
        if not regs:
            raise NotFound("No registries configured: add a [registries.NAME] section with `url` to ctx.toml.")
        return {"registries": [clone(r) if r.url is not None or name else _local(r) for r in regs]}
    try:
        ext = find(conf, name)
    except NotFound as exc:
        if "/" in name:
            raise
        names = ", ".join(r.name for r in conf.registries) or "none configured"
        raise NotFound(f"No registry or extension named {name!r}. Registries: {names}; their extensions: "
                       "`ctx registry list`.") from exc
    return install_extension(conf, ext, force)


def _local(reg: RegistryConfig) -> dict[str, Any]:
    root = checkout(reg)
    return {"registry": reg.name, "status": "local" if root.is_dir() else "missing", "path": str(root),
            "commit": None}


_SECTION = {"tool": "[tools.script.{name}]\npath = \"tools/{name}.lua\"\n",
            "agent": "[agents.script.{name}]\npath = \"agents/{name}.lua\"\n",
            "connector": "[connectors.script.{name}]\npath = \"connectors/{name}.lua\"\n"}
_NEXT = {"tool": "ctx tool test {name}", "agent": "ctx agent show {name}", "connector": "ctx connector test {name}"}


def install_extension(conf: Config, ext: Extension, force: bool) -> dict[str, Any]:
    """Copy ``ext``'s script beside ctx.toml once it loads in the sandbox, and register it."""
    if ext.problem is not None:
        raise InvalidInput(f"Registry {ext.registry!r} offers {ext.id} with a bad path: {ext.problem}; not "
                           "installed.")
    root = _root(conf, ext)
    source = _read(safe_file(root, ext.path), ext.id)
    if ext.path.endswith(".toml"):
        return _install_toml_agent(conf, ext, source, force)
    configured = _configured(conf, ext)
    folder = conf.path.parent / f"{ext.kind}s"
    dest = folder / f"{ext.name}.lua"
    if not force and (os.path.lexists(dest) or configured):
        what = str(dest) if os.path.lexists(dest) else f"[{ext.kind}s.script.{ext.name}] in {conf.path}"
        raise Conflict(f"{what} already exists; `ctx registry install {ext.id} --force` replaces the script.",
                       details={"path": str(dest)})
    section = _SECTION[ext.kind].format(name=ext.name)
    if ext.kind == "agent":
        if ext.description:
            section += f"description = {_toml_string(ext.description)}\n"
        if ext.tools:
            section += f"tools = [{', '.join(_toml_string(t) for t in ext.tools)}]\n"
    register = ext.kind != "connector" and not configured
    text = None
    if register:
        text = _with_section(conf, section, ext)
    tmpdir = folder / f".install-{os.getpid()}"
    try:
        tmpdir.mkdir(parents=True, exist_ok=True)
        tmp = tmpdir / dest.name
        tmp.write_bytes(source)
        _check_script(ext, tmp)
        existed = os.path.lexists(dest)
        if force:
            replace_file(tmp, dest)
        else:
            try:
                os.link(tmp, dest)
            except FileExistsError:
                raise Conflict(f"{dest} already exists; `ctx registry install {ext.id} --force` replaces "
                               "it.") from None
        if text is not None:
            try:
                _write_config(conf.path, text)
            except BaseException:
                if not existed:
                    dest.unlink(missing_ok=True)
                raise
    except OSError as exc:
        raise StorageError(f"Cannot write {dest}: {exc.strerror}.") from None
    finally:
        import shutil

        shutil.rmtree(tmpdir, ignore_errors=True)
    return {"id": ext.id, "kind": ext.kind, "name": ext.name, "registry": ext.registry,
            "commit": _head(root, _registry(conf, ext.registry).timeout), "path": str(dest),
            "config": str(conf.path), "section": section, "registered": register,
            "next": _NEXT[ext.kind].format(name=ext.name)}


def _configured(conf: Config, ext: Extension) -> bool:
    if ext.kind == "tool":
        return any(t.name == ext.name for t in conf.tools)
    if ext.kind == "agent":
        return any(a.name == ext.name for a in conf.agents)
    return any(c.type == "script" and c.name == ext.name for c in conf.connectors)


def _check_script(ext: Extension, path: Path) -> None:
    """The script loads in ctx's sandbox: a tool declares itself (its top level runs in a Lua worker, as
    when ctx starts it, and must define ``tool.execute``); an agent or connector must compile (it runs
    only when used)."""
    from cairn_servers.ctx.config import ToolConfig

    label = f"Lua {ext.kind} {ext.name!r} from registry {ext.registry!r}"
    if ext.kind == "tool":
        from cairn_servers.ctx.luaproc import LuaPool
        from cairn_servers.ctx.scripts import declare_tool

        with LuaPool(1) as pool:
            declare_tool(ToolConfig(name=ext.name, path=path, timeout=30.0, config={}), pool)
        return
    from lupa import lua54

    from cairn_servers.core.errors import ExtensionError
    from cairn_servers.ctx.lua import MAX_MEMORY, read_script

    source = read_script(path, label)
    # Compiled only (Lua's load, text mode, as the sandbox loads scripts): nothing in the script runs here.
    runtime = lua54.LuaRuntime(register_eval=False, register_builtins=False, max_memory=MAX_MEMORY)
    loaded = runtime.globals().load(source, f"={path.name}", "t")  # the chunk, or (nil, message)
    if isinstance(loaded, tuple) and loaded[0] is None:
        raise ExtensionError(f"{label}: Lua syntax error: {loaded[1]}")


def _install_toml_agent(conf: Config, ext: Extension, source: bytes, force: bool) -> dict[str, Any]:
    """An agent written as TOML (its keys are an inline agent's): added as ``[agents.inline.NAME]``."""
    configured = _configured(conf, ext)
    if configured:
        raise Conflict(f"An agent named {ext.name!r} is already in {conf.path}; edit or remove it there"
                       + (" (--force replaces scripts only)." if force else "."))
    try:
        body = source.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{ext.id}: {ext.path} is not UTF-8 text.") from None
    section = f"[agents.inline.{ext.name}]\n{body.rstrip()}\n"
    _write_config(conf.path, _with_section(conf, section, ext))
    root = _root(conf, ext)
    return {"id": ext.id, "kind": ext.kind, "name": ext.name, "registry": ext.registry,
            "commit": _head(root, _registry(conf, ext.registry).timeout), "path": None, "config": str(conf.path),
            "section": section, "registered": True, "next": _NEXT["agent"].format(name=ext.name)}


def _with_section(conf: Config, section: str, ext: Extension) -> str:
    """ctx.toml with ``section`` appended, refused unless the result is a valid configuration."""
    import tomllib

    from cairn_servers.ctx import config as cfg

    try:
        current = conf.path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"Cannot read {conf.path}: {exc.strerror}.") from None
    text = current + ("" if current.endswith("\n") or not current else "\n") + "\n" + section
    try:
        cfg.parse(tomllib.loads(text), conf.path, text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{ext.id} from registry {ext.registry!r} does not fit ctx.toml: {exc}.") from None
    except InvalidInput as exc:
        raise InvalidInput(f"{ext.id} from registry {ext.registry!r} does not fit ctx.toml: {exc.message}") from None
    return text


def _write_config(path: Path, text: str) -> None:
    from cairn_servers.core.files import write_atomic

    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        write_atomic(path, text.encode("utf-8"), mode=mode)
    except OSError as exc:
        raise StorageError(f"Cannot write {path}: {exc.strerror}.") from None


def _toml_string(value: str) -> str:
    import json

    return json.dumps(value)  # a JSON string is a valid TOML basic string


def update(conf: Config, name: str | None) -> list[dict[str, Any]]:
    """``ctx registry update [NAME]``: fetch and fast-forward the git registries (or the one named) and
    say which extensions were added, removed or changed. One with uncommitted changes is skipped."""
    regs = conf.registries if name is None else [_registry(conf, name)]
    if not regs:
        raise NotFound("No registries configured: add a [registries.NAME] section with `url` to ctx.toml.")
    reports = []
    for reg in regs:
        try:
            reports.append(_update_one(reg))
        except CairnError as exc:
            if name is not None:
                raise
            from cairn_servers.core.sanitize import scrub

            reports.append({"registry": reg.name, "status": "failed", "message": scrub(exc.message),
                            "exit_code": exc.exit_code})
    return reports


def _update_one(reg: RegistryConfig) -> dict[str, Any]:
    root = checkout(reg)
    report: dict[str, Any] = {"registry": reg.name, "status": "", "from": None, "to": None, "added": [],
                              "removed": [], "changed": []}
    if not root.is_dir():
        raise NotFound(f"Registry {reg.name!r} is not installed at {root}. Run `ctx registry install {reg.name}`.")
    if not (root / ".git").exists():
        return {**report, "status": "local", "message": "not a git repository; nothing to fetch"}
    what = f"Registry {reg.name!r}"
    try:
        if _git(["status", "--porcelain"], reg.timeout, what, root).strip():
            return {**report, "status": "skipped", "message": "uncommitted changes in the checkout; commit or "
                                                               "discard them first"}
        before = _head(root, reg.timeout)
        old = {e.id: e for e in _load(reg, root)}
        # no --depth: a shallow clone's new commits must keep their parents to fast-forward onto it
        _git(["fetch", "--quiet", "--no-tags", "origin", reg.branch], reg.timeout, what, root)
        try:
            _git(["merge", "--quiet", "--ff-only", "FETCH_HEAD"], reg.timeout, what, root)
        except _GitFailed as exc:
            raise Conflict(f"{what}: {reg.branch!r} cannot be fast-forwarded ({exc}). Remove {root} and run "
                           f"`ctx registry install {reg.name}` to clone it afresh.") from None
        after = _head(root, reg.timeout)
        files = (_git(["diff", "--name-only", f"{before}..{after}"], reg.timeout, what, root).splitlines()
                 if before and after and before != after else [])
    except _GitFailed as exc:
        raise _clone_error(reg, str(exc)) from None
    new = {e.id: e for e in _load(reg, root)}

    def touched(e: Extension) -> bool:
        folder = e.path.rpartition("/")[0]
        return any(f == e.path or (folder and f.startswith(folder + "/")) for f in files)

    return {**report, "status": "updated" if before != after else "up to date", "from": before, "to": after,
            "added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
            "changed": sorted(i for i in set(new) & set(old) if touched(new[i]) or touched(old[i]))}


# ---- text ---------------------------------------------------------------------------------------


def _ext_line(e: dict[str, Any]) -> str:
    tags = f" [{', '.join(e['tags'])}]" if e["tags"] else ""
    bad = f"  (cannot be installed: {e['problem']})" if e["problem"] else ""
    return f"{e['id']} — {e['description'] or '(no description)'}{tags} (from: {e['registry']}){bad}"


def list_text(data: dict[str, Any]) -> str:
    if not data["registries"]:
        return "No registries configured. Add a [registries.NAME] section (url, branch, path) to ctx.toml."
    lines = ["Registries:", ""]
    for r in data["registries"]:
        where = f"{r['path']}" + (" (git)" if r["git"] else "") + (" [readonly]" if r["readonly"] else "")
        lines.append(f"  {r['name']} — {where}")
        if r["installed"]:
            lines.append(f"    {r['connectors']} connectors, {r['tools']} tools, {r['agents']} agents")
        else:
            lines.append(f"    not installed: run `ctx registry install {r['name']}`")
    if not data["extensions"]:
        return "\n".join([*lines, "", "No extensions found."])
    lines += ["", "Available extensions:", ""]
    lines += [f"  {_ext_line(e)}" for e in data["extensions"]]
    return "\n".join(lines)


def search_text(hits: list[dict[str, Any]], words: list[str]) -> str:
    query = " ".join(words)
    if not hits:
        return f"No extensions matching {query!r}."
    return "\n".join([f"Found {len(hits)} extension(s) matching {query!r}:", ""] + [f"  {_ext_line(e)}" for e in hits])


def info_text(e: dict[str, Any]) -> str:
    lines = [f"Extension: {e['id']}", f"Registry:  {e['registry']}", f"Script:    {e['script']}"]
    for key, label in (("description", "Description"), ("tags", "Tags"), ("required_config", "Required config"),
                       ("host_apis", "Host APIs"), ("tools", "Tools")):
        if e[key]:
            lines.append(f"{label}: {', '.join(e[key]) if isinstance(e[key], list) else e[key]}")
    if e["problem"]:
        lines.append(f"Cannot be installed: {e['problem']}")
    else:
        lines.append(f"Install: ctx registry install {e['id']}")
    if e["readme"]:
        lines += ["", "--- README ---", "", e["readme"].rstrip()]
    return "\n".join(lines)


def install_text(data: dict[str, Any]) -> str:
    if "registries" in data:
        lines = []
        for r in data["registries"]:
            if r["status"] == "cloned":
                c = r["counts"]
                lines.append(f"Cloned registry {r['registry']!r} to {r['path']} ({(r['commit'] or '')[:12]}): "
                             f"{c['connector']} connectors, {c['tool']} tools, {c['agent']} agents")
            elif r["status"] == "present":
                lines.append(f"Registry {r['registry']!r} already installed at {r['path']} "
                             "(`ctx registry update` fetches changes)")
            elif r["status"] == "local":
                lines.append(f"Registry {r['registry']!r} is a local folder, {r['path']}: nothing to clone")
            else:
                lines.append(f"Registry {r['registry']!r}: {r['path']} does not exist and there is no url to clone")
        return "\n".join(lines)
    head = f"Installed {data['id']} from registry {data['registry']!r}" + (
        f" ({data['commit'][:12]})" if data["commit"] else "")
    if data["path"]:
        head += f" to {data['path']}"
    if data["registered"]:
        return f"{head}\nAdded to {data['config']}:\n\n{data['section']}\nTry it: {data['next']}"
    if data["kind"] == "connector":
        return (f"{head}\nAdd this section to {data['config']}, with the settings it needs:\n\n{data['section']}\n"
                f"Then try it: {data['next']}")
    return f"{head}\n{data['config']} already registers it.\nTry it: {data['next']}"


def update_text(reports: list[dict[str, Any]]) -> str:
    lines = []
    for r in reports:
        if r["status"] in ("updated", "up to date"):
            move = f" ({(r['from'] or '')[:12]} -> {(r['to'] or '')[:12]})" if r["status"] == "updated" else ""
            lines.append(f"{r['registry']}: {r['status']}{move}")
            for key in ("added", "removed", "changed"):
                if r[key]:
                    lines.append(f"  {key}: {', '.join(r[key])}")
            if r["changed"]:  # installed copies beside ctx.toml are the project's: never replaced behind its back
                lines.append("  (a copy already installed keeps its version: `ctx registry install KIND/NAME --force` "
                             "takes the new one)")
        else:
            lines.append(f"{r['registry']}: {r['status']}" + (f" ({r['message']})" if r.get("message") else ""))
    return "\n".join(lines)
