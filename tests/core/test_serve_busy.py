"""A port already in use: ``ctx serve mcp`` and ``brk serve`` stop with one error line that names the
address and the ``--bind`` fix, and never claim to be listening first."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from cairn_servers.brk.indexer import index
from cairn_servers.brk.sample import write_mainnet_sample

BIN = Path(sys.executable).parent


def test_a_busy_port_is_an_error_with_a_bind_hint(tmp_path: Path) -> None:
    config = tmp_path / "ctx.toml"
    config.write_text('[db]\npath = "kb.sqlite"\n[embedding]\nprovider = "disabled"\n')
    write_mainnet_sample(tmp_path / "blocks")
    index(tmp_path / "blocks", tmp_path / "vecs")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for name, argv in (("ctx", ["ctx", "--config", str(config), "serve", "mcp", "--bind", f"127.0.0.1:{port}"]),
                           ("brk", ["brk", "serve", "--out", str(tmp_path / "vecs"), "--bind", f"127.0.0.1:{port}"])):
            r = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=60)
            assert (r.returncode, r.stdout) == (4, "")
            assert r.stderr == (f"{name}: error: Cannot listen on 127.0.0.1:{port}: the port is in use (another "
                                f"program, or a {name} server already running). Stop it, or choose another port: "
                                "--bind 127.0.0.1:PORT.\n")
