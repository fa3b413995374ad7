"""ctx: a knowledge base over files and git repositories, searched by keyword, meaning, or both."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from cairn_servers.core.errors import CairnError

if TYPE_CHECKING:
    import argparse  # imported by _parser; `ctx serve mcp --stdio` starts without it
    from collections.abc import Callable

FORMAT_ENV = "CTX_OUTPUT_FORMAT"
# The sub-commands, in the order `ctx --help` lists them.
COMMANDS = ("init", "sources", "stats", "migrate", "sync", "search", "get", "embed", "export", "import", "serve",
            "config", "agent", "tool", "connector", "registry", "completion")
# The options every command takes (``common`` below) that may come before the sub-command's name.
_VALUE_OPTIONS = ("--config", "--format")
_FLAG_OPTIONS = ("--json", "--jsonl", "--text")


def _command(argv: list[str]) -> str | None:
    """The sub-command ``argv`` runs, when that is plain without argparse: its first word that is not one
    of the common options (written out in full) or their value. Anything else (``--help``, an
    abbreviated option, an unknown word) is None: the whole parser, whose messages list every command."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in _VALUE_OPTIONS:
            i += 2
        elif word in _FLAG_OPTIONS or word.startswith(tuple(f"{o}=" for o in _VALUE_OPTIONS)):
            i += 1
        else:
            return word if word in COMMANDS else None
    return None


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """``ctx``'s parser. With ``only`` (a name in :data:`COMMANDS`), that sub-command alone: argparse
    builds a whole parser per sub-command (several from the operations' declarations), and ``ctx
    search`` needs one of fourteen. Its help, usage and errors are the same as the whole parser's."""
    import argparse

    from cairn_servers.core.ops import add_subcommand
    from cairn_servers.ctx.ops import OPS

    from cairn_servers.core.cli import EXIT_CODES, add_completion, add_format, add_version, parser_class

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, metavar="PATH",
                        help="config file (default: $CTX_CONFIG, else the first of ./config/ctx.toml, "
                             "./.ctx/ctx.toml, $XDG_CONFIG_HOME/ctx/ctx.toml)")
    add_format(common, "ctx", suppress=True)

    parser = parser_class()(prog="ctx", description=__doc__, parents=[common], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version(parser, "ctx")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = COMMANDS if only is None else (only,)

    if "init" in wanted:
        sub.add_parser("init", parents=[common], help="write a commented starter config and create the database")
    if "sources" in wanted:
        add_subcommand(sub, OPS["sources"], parents=[common])
    if "stats" in wanted:
        sub.add_parser("stats", parents=[common], help="document, chunk and vector counts")
    if "migrate" in wanted:
        sub.add_parser("migrate", parents=[common], help="apply pending schema migrations to the database "
                       "(SQLite or PostgreSQL) and report its version")

    if "sync" in wanted:
        p = sub.add_parser("sync", parents=[common], help="index new and changed documents, drop deleted ones")
        p.add_argument("target", nargs="?", default="all", help="connector name, type, type:name, or all (default)")
        p.add_argument("--full", action="store_true", help="re-read and re-chunk every document")
        p.add_argument("--dry-run", action="store_true", help="report what would change without writing")
        p.add_argument("--since", metavar="DATE", help="write only new or changed documents updated on or after "
                       "DATE (YYYY-MM-DD, ISO 8601 or unix seconds); the others wait for a later sync")
        p.add_argument("--until", metavar="DATE", help="... and on or before DATE (a YYYY-MM-DD takes the whole day)")
        p.add_argument("--limit", metavar="N", help="write at most N new or changed documents per source; "
                       "the rest wait for a later sync")
        _progress_arg(p)

    # search, get: generated from their declarations (cairn_servers/ctx/ops.py), as MCP and HTTP are
    if "search" in wanted:
        add_subcommand(sub, OPS["search"], parents=[common])
    if "get" in wanted:
        add_subcommand(sub, OPS["get"], parents=[common])

    if "embed" in wanted:
        p = sub.add_parser("embed", parents=[common], help="compute embeddings")
        p.add_argument("action", choices=["pending", "rebuild"], help="pending: missing vectors only; rebuild: all")
        p.add_argument("--limit", metavar="N", help="embed at most N chunk texts; the rest stay pending")
        p.add_argument("--batch-size", metavar="N", help="texts per call of the provider (default: [embedding] "
                       "batch_size)")
        p.add_argument("--dry-run", action="store_true", help="count what would be embedded; embed (or drop) nothing")
        _progress_arg(p)

    if "export" in wanted:
        p = sub.add_parser("export", parents=[common],
                           help="write the documents and chunks (and vectors) as JSON Lines",
                           description="Write the knowledge base as JSON Lines: a header line, then each document "
                           "followed by its chunks, then (--vectors) the vectors. Streams; for another tool, a "
                           "static site, or `ctx import`. See docs/ctx.md, Export and import.")
        p.add_argument("-o", "--out", metavar="FILE",
                       help="write to FILE, replaced only when complete (default: stdout)")
        p.add_argument("--vectors", action="store_true", help="include the configured embedding model's vectors")

    if "import" in wanted:
        p = sub.add_parser("import", parents=[common], help="read a `ctx export` file into an empty knowledge base",
                           description="Read a `ctx export` file (- for stdin) into the knowledge base, in one "
                           "transaction: a bad line (reported with its number) or an interrupted import changes "
                           "nothing. The knowledge base must be empty unless --merge is given.")
        p.add_argument("file", metavar="FILE", help="the JSON Lines file, or - for stdin")
        p.add_argument("--merge", action="store_true",
                       help="import into a knowledge base that has documents: one with the same source and "
                            "source_id is replaced")

    if "serve" in wanted:
        p = sub.add_parser("serve", parents=[common],
                           help="serve the HTTP API and MCP (at / and /mcp, or over stdio)")
        p.add_argument("what", choices=["mcp"], nargs="?",
                       help="mcp: the tools over HTTP (/tools/*, MCP at / and /mcp) or --stdio")
        p.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout instead of HTTP")
        p.add_argument("--bind", metavar="HOST:PORT", help="listen address (default: [server] bind, 127.0.0.1:7331)")
        p.add_argument("--allow-remote", action="store_true",
                       help="allow a non-loopback bind address (requires [server] auth_token or $CTX_AUTH_TOKEN)")
        p.add_argument("--log-level", metavar="LEVEL",
                       help="diagnostics on stderr: error, warn (default), info, debug, off (or $CTX_LOG)")
        from cairn_servers.core.connections import env_help

        p.epilog, p.formatter_class = env_help("CTX"), argparse.RawDescriptionHelpFormatter

    if "config" in wanted:
        p = sub.add_parser("config", parents=[common], help="show the configuration in force (secrets masked)")
        csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
        csub.add_parser("show", parents=[common], help="the effective config, defaults filled in and ${VAR} "
                        "expanded, as TOML (text) or JSON; values from the environment and tokens read ***")

    # agent list, agent show: generated from their declarations (cairn_servers/ctx/ops.py), as HTTP is
    if "agent" in wanted:
        p = sub.add_parser("agent", parents=[common], help="list the agents (prompts) or show one's prompt")
        asub = p.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
        add_subcommand(asub, OPS["agent_list"], parents=[common])
        show = add_subcommand(asub, OPS["agent_show"], parents=[common])
        show.add_argument("--arg", dest="agent_args", action="append", default=[], metavar="KEY=VALUE",
                          help="an argument of the agent (repeatable); VALUE is text")
        _init_arg(asub, common, "agent")

    if "tool" in wanted:
        p = sub.add_parser("tool", parents=[common], help="list the tools or run one once")
        tsub = p.add_subparsers(dest="tool_command", metavar="ACTION", required=True)
        tsub.add_parser("list", parents=[common], help="built-in and Lua tools with their parameters")
        t = tsub.add_parser("test", parents=[common], help="run a tool with parameters, print its result")
        t.add_argument("name", help="tool name")
        t.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="a parameter (repeatable); VALUE is read as JSON when it parses, else as text")
        _init_arg(tsub, common, "tool")
    if "connector" in wanted:
        p = sub.add_parser("connector", parents=[common], help="start a Lua connector or try one without syncing")
        csub = p.add_subparsers(dest="connector_command", metavar="ACTION", required=True)
        _init_arg(csub, common, "connector")
        t = csub.add_parser("test", parents=[common], help="scan a configured connector and read its items as a "
                            "sync would, writing nothing")
        t.add_argument("name", help="connector name or type:name")
        t.add_argument("--limit", type=int, default=20, metavar="N", help="items to show (default 20; all are counted)")
    if "registry" in wanted:
        _registry_parser(sub, common)
    if "completion" in wanted:
        add_completion(sub, "ctx")
    return parser


def _registry_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("registry", parents=[common], help="extension registries: git repositories of Lua tools, "
                       "agents and connectors declared as [registries.NAME] in ctx.toml")
    rsub = p.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    rsub.add_parser("list", parents=[common], help="the registries and the extensions they offer")
    s = rsub.add_parser("search", parents=[common], help="the extensions whose name, description or tags hold "
                        "every WORD")
    s.add_argument("words", nargs="+", metavar="WORD", help="a word to look for (case does not matter)")
    i = rsub.add_parser("info", parents=[common], help="one extension: its registry, script, settings and README")
    i.add_argument("extension", metavar="KIND/NAME", help="tools/NAME, agents/NAME or connectors/NAME "
                   "(NAME alone when one kind has it)")
    i = rsub.add_parser("install", parents=[common], help="clone the registries not on disk yet; given KIND/NAME, "
                        "copy that extension beside ctx.toml (checked in the sandbox first) and register it")
    i.add_argument("name", nargs="?", metavar="NAME", help="a registry (default: every one with a url), or an "
                   "extension: tools/NAME, agents/NAME, connectors/NAME")
    i.add_argument("--force", action="store_true", help="replace the extension's script if it is already there")
    u = rsub.add_parser("update", parents=[common], help="fetch the git registries and fast-forward them; report "
                        "the extensions added, removed or changed (a checkout with local changes is skipped)")
    u.add_argument("name", nargs="?", metavar="NAME", help="one registry (default: all)")


def _init_arg(actions: Any, common: argparse.ArgumentParser, kind: str) -> None:
    p = actions.add_parser("init", parents=[common], help=f"write a starter Lua {kind}, {kind}s/NAME.lua beside "
                           "ctx.toml (never overwriting), and print the section that registers it")
    p.add_argument("name", metavar="NAME", help=f"the {kind}'s name: lowercase letters, digits, '_' and '-'")


def _progress_arg(p: argparse.ArgumentParser) -> None:
    from cairn_servers.core.cli import PROGRESS_MODES

    p.add_argument("--progress", choices=PROGRESS_MODES, default="auto",
                   help="progress on stderr: auto (a bar on a terminal, else JSON lines), bar, json or none")


def _fast_stdio(argv: list[str]) -> argparse.Namespace | None:
    """``ctx serve mcp --stdio [--config PATH] [--log-level L]`` (in any order after ``serve mcp``) parsed
    without argparse (``cairn_servers.core.argv``): building the whole parser, with the sub-commands derived from
    the operations' declarations, would delay the stdio server's first reply. Anything else (``--help``,
    another flag, a repeated one) returns None: the real parser."""
    if argv[:2] != ["serve", "mcp"]:
        return None
    from cairn_servers.core.argv import plain_flags

    found = plain_flags(argv[2:], {"--config": "config", "--log-level": "log_level"}, {"--stdio": "stdio"})
    if found is None or not found.pop("stdio", False):
        return None
    import types

    found.setdefault("log_level", None)  # --config stays absent unless given, as with argparse.SUPPRESS
    return types.SimpleNamespace(command="serve", what="mcp", stdio=True, bind=None, allow_remote=False,
                                 **found)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    fast = _fast_stdio(argv)  # the stdio server's start-up path: nothing more to import before serving
    if fast is not None:
        return _main(argv, fast)
    from cairn_servers.core.cli import guard

    return guard(lambda: _main(argv, None))


def _main(argv: list[str], args: argparse.Namespace | None) -> int:
    from cairn_servers.core import log

    log.name = "ctx"  # every command's log lines (a sync's skipped files) carry the command's name
    if args is None:
        parser = _parser(only=_command(argv))
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help()
            return 0
        if args.command == "completion":  # of the whole parser, every sub-command
            from cairn_servers.core.cli import completion_script

            sys.stdout.write(completion_script(_parser(), args.shell))
            return 0
        if args.command == "serve" and args.what is None:
            sys.stderr.write("ctx: error: say what to serve: `ctx serve mcp` serves the HTTP API and MCP on "
                             "127.0.0.1:7331 (--bind HOST:PORT to change it); `ctx serve mcp --stdio` speaks "
                             "MCP on stdin/stdout for a client that starts it.\n")
            return 2
    try:
        from cairn_servers.core.output import choose_format

        fmt = choose_format(getattr(args, "format", None), FORMAT_ENV)
        data, text, status = _run(args)
    except CairnError as exc:
        from cairn_servers.core.cli import fail

        return fail("ctx", exc)
    except KeyboardInterrupt:
        sys.stderr.write("ctx: interrupted\n")
        return 130
    if args.command == "serve" or args.command == "export" and not args.out:
        return status  # stdout belonged to the protocol (stdio), to the export, or to nobody
    from cairn_servers.core.output import render

    op = getattr(args, "op", None)
    out = text() if (fmt == "text" and text is not None) else render(data, fmt, _columns(op))
    if out:
        sys.stdout.write(out + "\n")
    return status


def _columns(op: Any) -> list[str] | None:
    """The header of an empty table of ``op``'s results (``ctx search x --format tsv`` with no hits)."""
    if op is None or op.name != "search":
        return None
    import dataclasses

    from cairn_servers.ctx.service import SearchResult

    return [f.name for f in dataclasses.fields(SearchResult)]


def _exit_code(code: str | None) -> int:
    from cairn_servers.core.errors import ALL_ERRORS

    return next((e.exit_code for e in ALL_ERRORS if e.code == code), 1)


def _run(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(data to render, optional custom text renderer, exit status) for the command."""
    action = getattr(args, f"{args.command}_command", None)
    if args.command == "registry":
        return _run_registry(args, action)
    if action == "init" or args.command == "connector":  # tool|agent|connector init, connector test
        return _run_scaffold(args, action)
    if args.command in ("serve", "tool", "config"):  # first: `serve mcp --stdio` need not import the service
        return _run_tools(args)
    if args.command == "agent":
        return _run_agent(args)
    from cairn_servers.ctx import service

    config = getattr(args, "config", None)
    if args.command == "init":
        report = service.init(config)
        verb = "Wrote" if report.created_config else "Kept existing"
        return report, lambda: f"{verb} {report.config_path}\nDatabase: {report.db_path}", 0

    svc = service.Service.from_config(config)
    try:
        op = getattr(args, "op", None)
        if op is not None:  # search, get, sources: checked by the declaration, as over MCP and HTTP
            from cairn_servers.core.ops import cli_args

            data = op.call(svc, cli_args(op, args), "cli")
            note = _unembedded_text(data) if op.name == "search" else None
            from cairn_servers.core.output import choose_format

            if note and choose_format(getattr(args, "format", None), FORMAT_ENV) != "text":  # the text output says it itself; JSON and tables keep their shape
                sys.stderr.write(f"ctx: note: {note}\n")
            text = TEXT.get(op.name)
            return data, (lambda: text(data)) if text else None, 0
        if args.command == "stats":
            return svc.stats(), None, 0
        if args.command == "migrate":
            m = svc.migrate()
            return m, lambda: (f"{m.database}: schema version {m.version}"
                               + (f" (migrated from {m.previous})" if m.previous != m.version else " (up to date)")), 0
        if args.command == "sync":
            from cairn_servers.core.output import ProgressBar

            summary = svc.sync(args.target, full=args.full, dry_run=args.dry_run,
                               progress=ProgressBar(mode=args.progress), since=args.since, until=args.until,
                               limit=args.limit)
            failed = [r for r in summary.sources if not r.ok]
            if failed:
                _warn_failures(summary)
            # The other sources synced; the exit status still says that one did not.
            return summary, lambda: _sync_text(summary), _exit_code(failed[0].error_code) if failed else 0
        if args.command == "embed":
            from cairn_servers.core.output import ProgressBar

            bar = ProgressBar(mode=args.progress)
            run = svc.embed_rebuild if args.action == "rebuild" else svc.embed_pending
            embedded = run(progress=bar, limit=args.limit, batch_size=args.batch_size, dry_run=args.dry_run)
            if embedded.error:
                from cairn_servers.core.sanitize import scrub

                sys.stderr.write(f"ctx: error: embedding stopped: {scrub(embedded.error)}\n")
            return embedded, None, _exit_code(embedded.error_code) if embedded.error else 0
        if args.command in ("export", "import"):
            return _transfer(svc, args)
    finally:
        svc.close()
    raise AssertionError(args.command)


def _transfer(svc: Any, args: argparse.Namespace) -> tuple[Any, Any, int]:
    from cairn_servers.ctx import transfer

    if args.command == "export":
        try:
            report = transfer.export_file(svc, args.out, vectors=args.vectors)
        except BrokenPipeError:  # the reader went away (`ctx export | head`): no traceback, 128 + SIGPIPE
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit cannot fail
            args.out = None
            return None, None, 141
        summary = (f"Exported {report.documents} documents, {report.chunks} chunks, {report.vectors} vectors "
                   f"({report.bytes} bytes) in {report.seconds} s")
        if not args.out or args.out == "-":  # stdout carries the export: the summary goes to stderr
            sys.stderr.write(f"ctx: {summary}\n")
            args.out = None
            return None, None, 0
        return report, lambda: f"{summary} to {report.path}", 0
    imported = transfer.import_file(svc, args.file, merge=args.merge)
    for note in imported.notes:
        sys.stderr.write(f"ctx: note: {note}\n")
    return imported, lambda: (f"Imported {imported.documents} documents, {imported.chunks} chunks, "
                              f"{imported.vectors} vectors in {imported.seconds} s"), 0


def _run_scaffold(args: argparse.Namespace, action: str | None) -> tuple[Any, Any, int]:
    """``ctx tool|agent|connector init NAME`` (no config needed: the script goes where it is or will be) and
    ``ctx connector test NAME``."""
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx import scaffold

    if action == "init":
        made = scaffold.init(args.command, args.name, cfg.resolve_path(getattr(args, "config", None)))
        return made, lambda: scaffold.text(made), 0
    report = scaffold.connector_test(cfg.load(getattr(args, "config", None)), args.name, args.limit)
    return report, lambda: scaffold.connector_text(report), 0


def _run_registry(args: argparse.Namespace, action: str | None) -> tuple[Any, Any, int]:
    """``ctx registry list|search|info|install|update`` on the registries of the configuration."""
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx import registry

    conf = cfg.load(getattr(args, "config", None))
    if action == "list":
        listed = registry.listing(conf)
        return listed, lambda: registry.list_text(listed), 0
    if action == "search":
        hits = registry.search(conf, args.words)
        return hits, lambda: registry.search_text(hits, args.words), 0
    if action == "info":
        shown = registry.info(conf, args.extension)
        return shown, lambda: registry.info_text(shown), 0
    if action == "install":
        done = registry.install(conf, args.name, force=args.force)
        return done, lambda: registry.install_text(done), 0
    reports = registry.update(conf, args.name)
    failed = [r for r in reports if r["status"] == "failed"]
    if failed:
        from cairn_servers.core.sanitize import scrub

        for r in failed:
            sys.stderr.write(f"ctx: warning: registry {r['registry']} was not updated: {scrub(r['message'])}\n")
    return reports, lambda: registry.update_text(reports), failed[0]["exit_code"] if failed else 0


def _run_tools(args: argparse.Namespace) -> tuple[Any, Any, int]:
    from cairn_servers.ctx import config as cfg

    if args.command == "serve":
        from cairn_servers.core import log

        log.configure(args.log_level, "CTX_LOG", "ctx")
    conf = cfg.load(getattr(args, "config", None))
    if args.command == "config":  # show: the only action
        shown = cfg.effective(conf)
        header = (f"ctx: the configuration in force, from {conf.path.resolve()}\n"
                  "Values from the environment (${VAR}) and secrets are masked as ***.")
        return shown, lambda: cfg.to_toml(shown, header), 0
    if args.command == "serve":
        if args.stdio:
            from cairn_servers.ctx.tools import Toolbox, mcp_server
            from cairn_servers.mcp.stdio import serve_stdio

            box = Toolbox(conf)
            try:
                # pending chunks embedded while serving, set up once `initialize` is answered (stdout is
                # the protocol's by then: anything the model's libraries print goes to stderr)
                return None, lambda: "", serve_stdio(mcp_server(box),
                                                     after_first=lambda: box.embed_in_background(wait=False))
            finally:
                box.close()
        from cairn_servers.ctx.http import serve

        serve(conf, bind=args.bind, allow_remote=args.allow_remote)
        return None, lambda: "", 0
    from cairn_servers.ctx.tools import Toolbox

    box = Toolbox(conf)
    try:
        if args.tool_command == "list":
            tools = box.list()
            return tools, lambda: _tools_text(tools), 0
        params = _params(args.param, box.op(args.name).input_schema("mcp"))
        result = box.call(args.name, params)
        return result, None, 0
    finally:
        box.close()


def _run_agent(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """``ctx agent list|show``: the declared operations on the configuration's agents (a Lua agent's
    ``context.search`` opens the knowledge base on its first call)."""
    from cairn_servers.core.errors import InvalidInput
    from cairn_servers.core.ops import cli_args
    from cairn_servers.ctx import config as cfg
    from cairn_servers.ctx.agents import Agents

    conf = cfg.load(getattr(args, "config", None))
    opened: list[Any] = []

    def service() -> Any:
        if not opened:
            from cairn_servers.ctx.service import Service

            opened.append(Service(conf))
        return opened[0]

    agents = Agents(conf, service)
    try:
        op = args.op
        extra: dict[str, Any] = {}
        if op.name == "agent_show":
            values: dict[str, str] = {}
            for pair in args.agent_args:
                key, sep, value = pair.partition("=")
                if not sep or not key:
                    raise InvalidInput(f"--arg {pair!r}: use KEY=VALUE.")
                if key in values:
                    raise InvalidInput(f"Agent argument {key!r} is given more than once; give it once.")
                values[key] = value
            extra["arguments"] = values
        data = op.call(agents, cli_args(op, args), "cli", **extra)
        text = TEXT.get(op.name)
        return data, (lambda: text(data)) if text else None, 0
    finally:
        agents.close()
        for svc in opened:
            svc.close()


def _params(pairs: list[str], schema: dict[str, Any]) -> dict[str, Any]:
    """``k=v`` pairs; a value is JSON when it parses (numbers, booleans, lists), except for string parameters."""
    import json

    from cairn_servers.core.errors import InvalidInput

    props = schema.get("properties", {})
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--param {pair!r}: use KEY=VALUE.")
        value: Any = raw
        if (props.get(key) or {}).get("type") != "string":
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
            except RecursionError:
                raise InvalidInput(f"--param {key}: the value is nested too deeply to be parsed.") from None
        out[key] = value
    return out


def _tools_text(tools: list[dict[str, Any]]) -> str:
    lines = []
    for t in tools:
        kind = "built-in" if t["builtin"] else "lua"
        lines.append(f"{t['name']}  ({kind})  {t['description']}")
        required = set(t["parameters"].get("required", []))
        for name, prop in t["parameters"].get("properties", {}).items():
            ptype = prop.get("type") or "any"
            ptype = "|".join(ptype) if isinstance(ptype, list) else ptype
            flag = " (required)" if name in required else ""
            desc = f"  {prop['description']}" if prop.get("description") else ""
            lines.append(f"    {name}: {ptype}{flag}{desc}")
    return "\n".join(lines)


def _warn_failures(summary: Any) -> None:
    from cairn_servers.core.sanitize import scrub

    for r in summary.sources:
        if not r.ok:
            sys.stderr.write(f"ctx: warning: {r.source} was not synced: {scrub(r.error or '')}\n")


def _unembedded_text(results: Any) -> str | None:
    """The line that says semantic ranking could not see some chunks (semantic and hybrid search), or None."""
    n = getattr(results, "unembedded", None)
    if not n:
        return None
    return (f"{n} chunk{'s are' if n != 1 else ' is'} not embedded yet: semantic ranking does not see "
            f"{'them' if n != 1 else 'it'} (hybrid ranks {'them' if n != 1 else 'it'} by keyword). `ctx embed pending` "
            "embeds them; `ctx serve` does it in the background.")


def _search_text(results: list[Any]) -> str:
    note = _unembedded_text(results)
    if not results:
        return "No results." + (f"\n{note}" if note else "")
    lines = []
    for i, r in enumerate(results, 1):
        lines.append(f"{i}. {r.title}  [{r.score:.3f}]")
        lines.append(f"   {r.source} {r.source_id}" + (f", {r.location}" if r.location else "") + f"  (updated {r.updated_at})")
        lines.append(f"   {r.snippet}")
        lines.append(f"   id: {r.id}" + (f"  {r.source_url}" if r.source_url else ""))
        explain = getattr(r, "explain", None)
        if explain is not None:
            lines.append(f"   why: {_explain_text(explain)}")
    if note:
        lines.append(note)
    return "\n".join(lines)


def _explain_text(e: dict[str, Any]) -> str:
    """``search --explain`` in one line: ``keyword #2 bm25 7.31 · vector #5 cosine 0.612 · fused 0.9836 (rrf ...)``."""
    kw, vec, fusion = e.get("keyword"), e.get("vector"), e.get("fusion")
    parts = [f"keyword #{kw['rank']} bm25 {kw['bm25']:.4g}" if kw else "keyword -" if fusion else "",
             f"vector #{vec['rank']} cosine {vec['cosine']:.4f}" if vec else "vector -" if fusion else ""]
    parts = [p for p in parts if p]
    if fusion:
        params = ", ".join(f"{k} {v}" for k, v in fusion.items() if k != "method")
        parts.append(f"fused {e['fused']:.6f} ({fusion['method']}, {params})")
    return " · ".join(parts)


def _doc_text(doc: Any) -> str:
    head = [f"# {doc.title}", f"id: {doc.id}", f"source: {doc.source} {doc.source_id}", f"updated: {doc.updated_at}"]
    if doc.author:
        head.append(f"author: {doc.author}")
    if doc.source_url:
        head.append(f"url: {doc.source_url}")
    head.append(f"chunks: {len(doc.chunks)}")
    return "\n".join(head) + "\n\n" + str(doc.body)


def _agents_text(agents: list[dict[str, Any]]) -> str:
    if not agents:
        return "No agents. Add [agents.inline.NAME] (description, system_prompt, tools, arguments) to ctx.toml."
    lines = []
    for a in agents:
        lines.append(f"{a['name']}  ({a['kind']})  {a['description']}")
        if a["tools"]:
            lines.append(f"    tools: {', '.join(a['tools'])}")
        for arg in a["arguments"]:
            flag = " (required)" if arg["required"] else (f" (default {arg['default']!r})" if "default" in arg else "")
            lines.append(f"    {arg['name']}{flag}" + (f"  {arg['description']}" if arg["description"] else ""))
    return "\n".join(lines)


def _agent_text(agent: dict[str, Any]) -> str:
    search = agent["search"]
    where = f", sources {', '.join(search['sources'])}" if search["sources"] else ""
    limit = f", limit {search['limit']}" if search["limit"] else ""
    lines = [f"Agent: {agent['name']} ({agent['kind']})"]
    if agent["description"]:
        lines.append(f"Description: {agent['description']}")
    lines += [f"Tools: {', '.join(agent['tools']) or 'none listed'}", f"Search: {search['mode']}{where}{limit}", "",
              "System prompt:", agent["system"]]
    for m in agent["messages"]:
        lines += ["", f"[{m['role']}]", m["content"]]
    return "\n".join(lines)


# The text (``--text``, a terminal) of an operation's data; the others print it as --format says.
TEXT: dict[str, Callable[[Any], str]] = {"search": _search_text, "get": _doc_text, "agent_list": _agents_text,
                                         "agent_show": _agent_text}


def _sync_text(summary: Any) -> str:
    lines = []
    for r in summary.sources:
        if not r.ok:
            lines.append(f"{r.source}: FAILED ({r.error})")
            continue
        prefix = "would: " if r.dry_run else ""
        lines.append(
            f"{r.source}: {prefix}{r.added} added, {r.updated} updated, {r.deleted} deleted, "
            f"{r.unchanged} unchanged, {r.skipped} skipped, {r.chunks} chunks written ({r.seconds:.2f} s)"
            + (f", {r.held} held back by --since/--until/--limit" if r.held else "")
            + ("  [resumed an interrupted sync]" if r.resumed else "")
        )
        lines.extend(f"  warning: {w}" for w in r.warnings)
    e = summary.embedding
    if e is not None:
        lines.append(f"embeddings ({e.model}): {e.embedded} embedded, {e.pending} pending ({e.seconds:.2f} s)"
                     + (f"  error: {e.error}" if e.error else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
