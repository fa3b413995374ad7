"""Fetch a document over HTTP(S) or from a ``file://`` URL, with caps and clear errors.

* timeouts: ``connect`` seconds to connect, ``timeout`` seconds for the whole download;
* redirects followed (at most ``MAX_REDIRECTS``), the final URL reported;
* conditional requests: pass the ``etag`` / ``last_modified`` of the copy you hold and a
  ``304 Not Modified`` comes back as a ``FetchResult`` with ``status=304`` (``not_modified``) and ``body=None``;
* streaming with a size cap: a download larger than ``max_bytes`` stops early with ``TooLarge``;
* local files are opened once and read from that descriptor only;
* ``guard`` (:class:`cairn_servers.core.guard.Guard`, for untrusted callers): files only inside its folders,
  connections only to addresses it allows, checked on every connection, redirects included.

Errors are Cairn's: ``NetworkError`` (unreachable, bad status), ``NotFound`` (HTTP 404/410, missing
file), ``Timeout``, ``TooLarge``, ``InvalidInput`` (unsupported URL). httpx is imported only when an
HTTP URL is fetched, so command-line tools that never fetch do not pay for it.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable
from urllib.parse import unquote, urlsplit

from cairn_servers.core.errors import InvalidInput, NetworkError, NotFound, Timeout, TooLarge

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_REDIRECTS = 5
USER_AGENT = "cairn/0.1 (+https://github.com/cairn)"

if TYPE_CHECKING:  # the guard (socket, ipaddress) is imported only by guarded fetches
    import ssl

    import httpx

    from cairn_servers.core.guard import Guard

Progress = Callable[[int, int | None], None]  # (bytes so far, total or None)


@dataclass
class FetchResult:
    url: str  # the final URL, after redirects
    status: int
    body: bytes | None  # None when not_modified
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None

    @property
    def not_modified(self) -> bool:
        return self.status == 304


def _human(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n} bytes"


def is_url(text: str) -> bool:
    return urlsplit(text).scheme.lower() in ("http", "https", "file")


def fetch(url: str, *, etag: str | None = None, last_modified: str | None = None,
          max_bytes: int = DEFAULT_MAX_BYTES, timeout: float = DEFAULT_TIMEOUT,
          connect: float = DEFAULT_CONNECT_TIMEOUT, headers: dict[str, str] | None = None,
          progress: Progress | None = None, guard: Guard | None = None) -> FetchResult:
    """GET ``url`` (http, https or file); see the module docstring for the guarantees.

    ``guard`` (for untrusted callers, such as an agent over MCP) limits what is read: files only
    inside its folders (checked on the opened descriptor), and connections only to the addresses it
    allows, checked on the resolved address of every connection, redirect hops included. Proxy
    variables from the environment are then ignored, so that no proxy connects in the guard's place.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        return read_file(file_url_path(url), max_bytes=max_bytes, progress=progress, guard=guard)
    if scheme not in ("http", "https"):
        raise InvalidInput(f"Unsupported URL {url!r}: use an http://, https:// or file:// URL, or a local path.")
    return _fetch_http(url, etag=etag, last_modified=last_modified, max_bytes=max_bytes,
                       timeout=timeout, connect=connect, headers=headers, progress=progress, guard=guard)


def file_url_path(url: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidInput(f"Unsupported file URL {url!r}: only local files (file:///path) can be read.")
    return Path(unquote(parts.path))


def read_file(path: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, progress: Progress | None = None,
              guard: Guard | None = None) -> FetchResult:
    """A local file as a FetchResult (status 200, last_modified from its mtime).

    The file is opened once and only that descriptor is read (its type and size come from fstat), so
    nothing can be swapped in between a check and the read. With a ``guard``, the descriptor must lie
    inside the guard's folders (:meth:`Guard.open_file`).
    """
    try:
        if guard is not None:
            fd = guard.open_file(path)
        else:  # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise InvalidInput(f"{path} is a directory. Give the path of an llms.txt file.")
            if not stat.S_ISREG(info.st_mode):
                raise InvalidInput(f"{path} is not a regular file. Give the path of an llms.txt file.")
            if info.st_size > max_bytes:
                raise TooLarge(f"{path} is {_human(info.st_size)}, over the {_human(max_bytes)} cap. Raise the "
                               "cap (--max-bytes) if you trust this file.")
            data = _read_all(fd, max_bytes + 1)
            if guard is not None:  # report what was read (the guard has imported this module already)
                from cairn_servers.core.guard import descriptor_path

                real = descriptor_path(fd) or path.resolve()
            else:
                real = path.resolve()
        finally:
            os.close(fd)
    except FileNotFoundError as exc:
        raise NotFound(f"No such file: {path}. Check the path.") from exc
    except IsADirectoryError as exc:
        raise InvalidInput(f"{path} is a directory. Give the path of an llms.txt file.") from exc
    except PermissionError as exc:
        raise InvalidInput(f"Cannot read {path}: permission denied.") from exc
    except NotADirectoryError as exc:
        raise NotFound(f"No such file: {path} (a parent is not a folder). Check the path.") from exc
    except OSError as exc:  # name too long, symlink loop, I/O error...
        raise InvalidInput(f"Cannot read {path}: {exc.strerror or exc}. Check the path.") from exc
    except ValueError as exc:  # a NUL byte in the path
        raise InvalidInput(f"Cannot read {str(path)!r}: {exc}. Check the path.") from exc
    if len(data) > max_bytes:  # it grew since fstat()
        raise TooLarge(f"{path} is over the {_human(max_bytes)} cap.")
    if progress:
        progress(len(data), len(data))
    mtime = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(info.st_mtime))
    return FetchResult(url=real.as_uri(), status=200, body=data, last_modified=mtime)


def _read_all(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(1 << 20, limit - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _fetch_http(url: str, *, etag: str | None, last_modified: str | None, max_bytes: int,
                timeout: float, connect: float, headers: dict[str, str] | None,
                progress: Progress | None, guard: Guard | None = None) -> FetchResult:
    import httpx

    send = {"User-Agent": USER_AGENT, "Accept": "text/plain, text/markdown;q=0.9, */*;q=0.5"}
    if headers:
        send.update(headers)
    if etag:
        send["If-None-Match"] = etag
    if last_modified:
        send["If-Modified-Since"] = last_modified
    deadline = time.monotonic() + timeout
    limits = httpx.Timeout(timeout, connect=connect)
    try:
        # httpx follows redirects one hop at a time; with a guard, each hop's new connection goes
        # through the guarded transport (a reused keep-alive connection was checked when opened).
        transport = _guarded_transport(guard) if guard is not None else None
        with httpx.Client(follow_redirects=True, max_redirects=MAX_REDIRECTS, timeout=limits,
                          transport=transport, trust_env=guard is None) as client:
            with client.stream("GET", url, headers=send) as resp:
                final = str(resp.url)
                got_etag = resp.headers.get("etag")
                got_lm = resp.headers.get("last-modified")
                ctype = resp.headers.get("content-type")
                if resp.status_code == 304:
                    return FetchResult(final, 304, None, got_etag or etag, got_lm or last_modified, ctype)
                if resp.status_code in (404, 410):
                    raise NotFound(f"{url} answered HTTP {resp.status_code}: nothing there. Check the URL.")
                if resp.status_code >= 400:
                    raise NetworkError(f"{url} answered HTTP {resp.status_code} {resp.reason_phrase}. "
                                       "Check the URL, or retry later.")
                declared = resp.headers.get("content-length")
                total = int(declared) if declared and declared.isdigit() else None
                if total is not None and total > max_bytes:
                    raise TooLarge(f"{url} is {_human(total)}, over the {_human(max_bytes)} download cap. "
                                   "Raise the cap (--max-bytes) if you trust this source.")
                chunks: list[bytes] = []
                received = 0
                for chunk in resp.iter_bytes():
                    received += len(chunk)
                    if received > max_bytes:
                        raise TooLarge(f"{url} sent more than the {_human(max_bytes)} download cap. "
                                       "Raise the cap (--max-bytes) if you trust this source.")
                    if time.monotonic() > deadline:
                        raise Timeout(f"Downloading {url} took longer than {timeout:g} s. Retry, or "
                                      "raise the timeout (--timeout).")
                    chunks.append(chunk)
                    if progress:
                        progress(received, total)
                return FetchResult(final, resp.status_code, b"".join(chunks), got_etag, got_lm, ctype)
    except httpx.TimeoutException as exc:
        raise Timeout(f"{url} did not answer within {timeout:g} s ({type(exc).__name__}). Retry, or "
                      "raise the timeout (--timeout).") from exc
    except httpx.TooManyRedirects as exc:
        raise NetworkError(f"{url} redirected more than {MAX_REDIRECTS} times. Check the URL.") from exc
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"Invalid URL {url!r}: {exc}.") from exc
    except httpx.HTTPError as exc:
        raise NetworkError(f"Cannot fetch {url}: {exc or type(exc).__name__}. Check the URL and your "
                           "network connection.") from exc


@functools.lru_cache(maxsize=2)
def _ssl_context(cert_file: str | None, cert_dir: str | None) -> "ssl.SSLContext":
    """httpx's default TLS context (SSL_CERT_FILE / SSL_CERT_DIR still count), built once per
    setting: loading the CA bundle takes 50-150 ms, more than a small download."""
    import httpx

    return httpx.create_ssl_context(trust_env=True)


def _guarded_transport(guard: Guard) -> "httpx.HTTPTransport":
    """An httpx transport whose every TCP connection is made by ``guard``'s rules: the host is
    resolved once, every address checked (refused ones raise before any connection is attempted),
    and the socket connects to a checked IP itself, so a second DNS answer cannot differ (rebinding).
    TLS still verifies the certificate against the host name of the URL."""
    import httpcore
    import httpx

    class GuardedBackend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None,
                        socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
            failed: httpcore.ConnectError | None = None
            for ip in guard.connect_addresses(host, port):
                try:
                    return super().connect_tcp(ip, port, timeout, local_address, socket_options)
                except httpcore.ConnectError as exc:  # try the host's next address
                    failed = exc
            assert failed is not None
            raise failed

    ssl_context = _ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    transport = httpx.HTTPTransport(verify=ssl_context, trust_env=False)
    # httpx exposes no network backend option; its transport wraps exactly this pool (httpx 0.28).
    transport._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=GuardedBackend())
    return transport
